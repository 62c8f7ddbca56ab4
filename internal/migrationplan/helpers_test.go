package migrationplan

import "time"

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
