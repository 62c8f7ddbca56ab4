package decide

import (
	"testing"

	"github.com/devicewarden/devicewarden/internal/methodcount"
)

// maxMethods bounds a type of this package: a type that grows past it is split by concept (the
// fence, the review, the ladder, the unit), each over the same state.
const maxMethods = 25

// TestNoTypeHasMoreThanItsShare counts the methods declared on each type of the package.
func TestNoTypeHasMoreThanItsShare(t *testing.T) {
	methodcount.Bound(t, ".", maxMethods, "DeviceState")
}
