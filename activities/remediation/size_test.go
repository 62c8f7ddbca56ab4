package remediation

import (
	"testing"

	"github.com/devicewarden/devicewarden/internal/methodcount"
)

// maxMethods bounds a type of this package: Activities holds the activities and the helpers
// every concept shares; a concept's helpers go to its own view (concepts.go).
const maxMethods = 25

// TestNoTypeHasMoreThanItsShare counts the methods declared on each type of the package.
func TestNoTypeHasMoreThanItsShare(t *testing.T) {
	methods, err := methodcount.Of(".")
	if err != nil {
		t.Fatal(err)
	}
	if methods["Activities"] == 0 {
		t.Fatal("read no method of Activities")
	}
	for typ, n := range methods {
		if n > maxMethods {
			t.Errorf("%s has %d methods, more than %d: split it by concept", typ, n, maxMethods)
		}
	}
}
