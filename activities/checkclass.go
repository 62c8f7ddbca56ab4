package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// CheckClassName is the DeviceClass DeviceWarden keeps for checking a driver's devices that no
// claim named a class for (a device its driver tainted, one gone from its slice): it selects
// exactly the driver's devices; the check claim's own selector pins the one device.
func CheckClassName(driver string) string {
	sum := sha256.Sum256([]byte(driver))
	return "devicewarden-check-" + hex.EncodeToString(sum[:6])
}

// ensureDriverClass creates the DeviceClass name selecting every device of driver, unless it
// exists; created says whether this call made it.
func (a *Activities) ensureDriverClass(ctx context.Context, name, driver string) (created bool, err error) {
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy}},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver == " + strconv.Quote(driver)},
		}}},
	}
	_, err = a.Kube.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{FieldManager: kubeobj.FieldManager})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create device class %s: %w", name, err)
	}
	return true, nil
}

// checkClass makes sure the driver's check class exists and returns its name.
func (a *Activities) checkClass(ctx context.Context, driver string) (string, error) {
	name := CheckClassName(driver)
	if _, err := a.ensureDriverClass(ctx, name, driver); err != nil {
		return "", fmt.Errorf("%w (for checks of driver %s)", err, driver)
	}
	return name, nil
}
