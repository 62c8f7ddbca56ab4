//go:build lean

package app

// Embeds says whether this build can run the Temporal server in-process: the lean build cannot.
const Embeds = false

func startEmbedded(TemporalOptions) (EmbeddedServer, error) { return nil, ErrNoEmbeddedServer }
