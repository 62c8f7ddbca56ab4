//go:build !lean

package buildinfo

// Flavour names this build: the full one, with everything for one machine.
const Flavour = "full"
