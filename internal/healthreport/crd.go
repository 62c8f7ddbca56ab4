package healthreport

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

// crd is the DeviceHealthReport CustomResourceDefinition; the chart ships the same file (crds/).
//
//go:embed crd.yaml
var crd []byte

// CRD is the DeviceHealthReport CustomResourceDefinition as JSON, for an apiserver.
func CRD() ([]byte, error) {
	b, err := yaml.YAMLToJSON(crd)
	if err != nil {
		return nil, fmt.Errorf("the DeviceHealthReport CRD: %w", err)
	}
	return b, nil
}
