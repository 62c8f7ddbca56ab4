// Command devicewarden turns device health signals into durable, auditable remediation.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/devicewarden/devicewarden/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(cli.Execute(ctx, os.Args[1:]))
}
