package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files a capacity command reads: a missing one says which, a broken one names the file.
func TestCapacityFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadClaims(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read claims") {
		t.Errorf("missing claims: %v", err)
	}
	if _, err := loadTenants(filepath.Join(dir, "none")); err == nil || !strings.Contains(err.Error(), "read tenants file") {
		t.Errorf("missing tenants: %v", err)
	}
	claims := filepath.Join(dir, "claims.yaml")
	if err := os.WriteFile(claims, []byte("metadata: {name: a}\nspec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu}}]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cs, err := loadClaims(claims); err != nil || len(cs) != 1 {
		t.Errorf("claims = %v, %v", cs, err)
	}
	tenants := filepath.Join(dir, "tenants.yaml")
	if err := os.WriteFile(tenants, []byte("tenants:\n  team-a: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTenants(tenants); err == nil || !strings.Contains(err.Error(), tenants) {
		t.Errorf("broken tenants file not named: %v", err)
	}
}
