package watcher

import (
	"testing"

	"github.com/devicewarden/devicewarden/internal/methodcount"
)

// maxMethods bounds a type of this package: a type that grows past it is split by concept (a
// source of its own, a view of the store), each over the same state.
const maxMethods = 25

// TestNoTypeHasMoreThanItsShare counts the methods declared on each type of the package.
func TestNoTypeHasMoreThanItsShare(t *testing.T) {
	methodcount.Bound(t, ".", maxMethods, "Watcher", "store")
}
