//go:build !lean

package app

import (
	"path/filepath"

	"github.com/devicewarden/devicewarden/internal/temporalserver"
)

// Embeds says whether this build can run the Temporal server in-process (the full build can).
const Embeds = true

// startEmbedded starts the in-process Temporal server (SQLite file, Web UI).
func startEmbedded(o TemporalOptions) (EmbeddedServer, error) {
	srv, err := temporalserver.Start(temporalserver.Config{
		DBPath: o.DBPath, FrontendAddress: o.FrontendAddress, UIAddress: o.UIAddress, Namespace: o.Namespace,
		LogFile:                   filepath.Join(filepath.Dir(o.DBPath), "temporal-server.log"),
		SuggestContinueAsNewAfter: o.SuggestContinueAsNewAfter,
	})
	if err != nil {
		return nil, err
	}
	return srv, nil
}
