// Package layers holds no code: its test keeps the import rules of the tree (see
// docs/architecture.md). A package that imports one on its own or a higher layer, or anything
// outside workflows, worker and activities that imports workflows or an activity package, fails
// it.
package layers
