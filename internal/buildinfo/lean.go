//go:build lean

package buildinfo

// Flavour names this build: the lean one for clusters.
const Flavour = "lean"
