package remediation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// CheckClassName is the DeviceClass DeviceWarden keeps for checking a driver's devices that no
// claim named a class for (a device its driver tainted, one gone from its slice): it selects
// exactly the driver's devices; the check claim's own selector pins the one device.
func CheckClassName(driver string) string {
	sum := sha256.Sum256([]byte(driver))
	return "devicewarden-check-" + hex.EncodeToString(sum[:6])
}

// checkClass makes sure the driver's check class exists and returns its name.
func (v checkPods) checkClass(ctx context.Context, driver string) (string, error) {
	a := v.a
	name := CheckClassName(driver)
	if _, err := kubeobj.EnsureDriverClass(ctx, a.Kube, name, driver); err != nil {
		return "", fmt.Errorf("%w (for checks of driver %s)", err, driver)
	}
	return name, nil
}
