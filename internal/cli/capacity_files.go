package cli

import (
	"fmt"
	"os"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devicewarden/devicewarden/internal/capacity"
)

// loadClaims reads the claims of a what-if from a YAML file.
func loadClaims(path string) ([]*resourcev1.ResourceClaim, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read claims: %w", err)
	}
	return capacity.ParseClaims(data, path)
}

// loadTenants reads a tenants file.
func loadTenants(path string) (map[string][]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tenants file: %w", err)
	}
	return capacity.ParseTenants(data, path)
}
