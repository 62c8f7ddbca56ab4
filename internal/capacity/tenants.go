package capacity

import (
	"bytes"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
)

// LoadTenants reads a tenants file: for each restricted namespace, the DeviceClasses it may claim.
//
//	tenants:
//	  team-a: [gpu.example.com]
//	  team-b: [gpu.example.com, gpu-shared.example.com]
func LoadTenants(path string) (map[string][]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tenants file: %w", err)
	}
	var f struct {
		Tenants map[string][]string `yaml:"tenants"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	for ns, classes := range f.Tenants {
		if len(classes) == 0 {
			return nil, fmt.Errorf("tenants file %s: namespace %s lists no class (it could claim nothing; leave it out to leave it free)", path, ns)
		}
	}
	return f.Tenants, nil
}
