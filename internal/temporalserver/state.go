package temporalserver

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	"go.temporal.io/server/common/resolver"
)

// ErrStateInUse says that another process runs an embedded server on the same database file.
var ErrStateInUse = errors.New("in use by another process")

// lockState takes an exclusive lock beside the database file, held until the server stops: two
// servers on one SQLite file would each believe they own every shard, and forgetMembership
// would remove a live server's rows. The kernel drops the lock when its process dies, so a
// SIGKILLed process never leaves it behind.
func lockState(dbPath string) (*os.File, error) {
	f, err := os.OpenFile(dbPath+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("temporal database %s: %w (stop it, or give this one another --state-dir)", dbPath, ErrStateInUse)
		}
		return nil, fmt.Errorf("lock temporal database %s: %w", dbPath, err)
	}
	return f, nil
}

func unlockState(f *os.File) {
	if f != nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}
}

// forgetMembership deletes the cluster membership rows that an earlier process left in the file.
// The embedded server is the only member of its cluster, and with the state lock held no other
// server runs on this file, so every row belongs to a process that is gone. Each of the server's
// services bootstraps its ring from the rows heartbeated in the last 20 s; with a dead process's
// rows among them the join did not complete within MaxJoinDuration (37-40 s measured), so a
// restart within 20 s of a stop, clean or not, served nothing for about 40 s, and clients gave up.
// Forgetting the rows makes every start what the first start on a new file is.
func forgetMembership(sqlCfg *config.SQL) error {
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, sqlCfg, resolver.NewNoopResolver(), log.NewNoopLogger(), metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("open temporal database: %w", err)
	}
	defer func() { _ = db.Close() }()
	if err := db.Exec("DELETE FROM cluster_membership"); err != nil {
		return fmt.Errorf("forget the previous process's cluster membership: %w", err)
	}
	return nil
}
