package capacity

import (
	"bytes"
	"fmt"

	"gopkg.in/yaml.v3"
)

// ParseTenants reads a tenants file (data, read from source): for each restricted namespace, the DeviceClasses it may claim.
//
//	tenants:
//	  team-a: [gpu.example.com]
//	  team-b: [gpu.example.com, gpu-shared.example.com]
func ParseTenants(data []byte, source string) (map[string][]string, error) {
	var f struct {
		Tenants map[string][]string `yaml:"tenants"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", source, err)
	}
	for ns, classes := range f.Tenants {
		if len(classes) == 0 {
			return nil, fmt.Errorf("tenants file %s: namespace %s lists no class (it could claim nothing; leave it out to leave it free)", source, ns)
		}
	}
	return f.Tenants, nil
}
