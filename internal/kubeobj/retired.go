package kubeobj

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/devicewarden/devicewarden/internal/device"
)

// LabelRetired marks the ConfigMaps that keep a retired device's evidence.
const LabelRetired = "devicewarden.io/retired"

// RetiredName is the ConfigMap in DeviceWarden's namespace that keeps a retired device's
// evidence: every fault, repair try and probe of it, with times.
func RetiredName(id device.ID) string {
	sum := sha256.Sum256([]byte(id.String()))
	return "devicewarden-retired-" + hex.EncodeToString(sum[:8])
}
