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
	methods, err := methodcount.Of(".")
	if err != nil {
		t.Fatal(err)
	}
	if methods["DeviceState"] == 0 {
		t.Fatal("read no method of DeviceState")
	}
	for typ, n := range methods {
		if n > maxMethods {
			t.Errorf("%s has %d methods, more than %d: split it by concept", typ, n, maxMethods)
		}
	}
}
