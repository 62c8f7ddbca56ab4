package kubeobj

import (
	"fmt"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
)

// AttrExpr is the CEL comparison of one identifying attribute with the device's value.
func AttrExpr(driver, name string, attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) (string, error) {
	domain, short := driver, name
	if d, n, ok := strings.Cut(name, "/"); ok {
		domain, short = d, n
	}
	v, ok := attrs[resourcev1.QualifiedName(name)]
	if !ok && domain == driver {
		v, ok = attrs[resourcev1.QualifiedName(driver+"/"+short)]
	}
	if !ok {
		return "", fmt.Errorf("has no attribute %q to identify it", name)
	}
	ref := fmt.Sprintf("device.attributes[%q].%s", domain, short)
	switch {
	case v.StringValue != nil:
		return fmt.Sprintf("%s == %q", ref, *v.StringValue), nil
	case v.IntValue != nil:
		return ref + " == " + strconv.FormatInt(*v.IntValue, 10), nil
	case v.BoolValue != nil:
		return ref + " == " + strconv.FormatBool(*v.BoolValue), nil
	case v.VersionValue != nil:
		return fmt.Sprintf("%s.compareTo(semver(%q)) == 0", ref, *v.VersionValue), nil
	}
	return "", fmt.Errorf("attribute %q has no value", name)
}

// AttrValue is an attribute's value as text ("" when the device has none).
func AttrValue(driver, name string, attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) string {
	v, ok := attrs[resourcev1.QualifiedName(name)]
	if !ok {
		v = attrs[resourcev1.QualifiedName(driver+"/"+name)]
	}
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.IntValue != nil:
		return strconv.FormatInt(*v.IntValue, 10)
	case v.BoolValue != nil:
		return strconv.FormatBool(*v.BoolValue)
	case v.VersionValue != nil:
		return *v.VersionValue
	}
	return ""
}
