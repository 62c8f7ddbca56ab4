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
	methodcount.Bound(t, ".", maxMethods, "Activities")
}
