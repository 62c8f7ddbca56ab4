// Package imagecheck inspects the OCI archive `make image` builds (its test runs under the image
// build tag, from `make image-check`).
package imagecheck
