package capacity

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ParseClaims reads ResourceClaims from YAML (documents separated by ---) read from source (a
// file's path, named in every error); each must name its requests. Claims without a UID get one,
// so shares can be told apart.
func ParseClaims(data []byte, source string) ([]*resourcev1.ResourceClaim, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*resourcev1.ResourceClaim
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("claims %s: document %d: %w", source, i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var c resourcev1.ResourceClaim
		if err := utilyaml.UnmarshalStrict(doc, &c); err != nil {
			return nil, fmt.Errorf("claims %s: document %d: %w", source, i, err)
		}
		if c.Kind != "" && c.Kind != "ResourceClaim" {
			return nil, fmt.Errorf("claims %s: document %d is a %s, want ResourceClaim", source, i, c.Kind)
		}
		if len(c.Spec.Devices.Requests) == 0 {
			return nil, fmt.Errorf("claims %s: document %d (%s) has no device requests", source, i, c.Name)
		}
		if c.UID == "" {
			c.UID = types.UID(fmt.Sprintf("what-if-%d", i))
		}
		defaultRequests(&c)
		out = append(out, &c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("claims %s: no ResourceClaim in it", source)
	}
	return out, nil
}

// Devices lists the devices (and shares) a node's answer allocates.
func Devices(f NodeFit) string {
	var out []string
	for _, r := range f.Results {
		for _, d := range r.Devices.Results {
			s := d.Driver + "/" + d.Pool + "/" + d.Device
			if m, ok := d.ConsumedCapacity["memory"]; ok {
				s += " (" + m.String() + ")"
			}
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// Bytes writes a byte count as a Kubernetes quantity (2800Gi).
func Bytes(v int64) string { return resource.NewQuantity(v, resource.BinarySI).String() }

// defaultRequests applies the apiserver's defaults the allocator relies on: a request without an
// allocation mode asks for exactly one device.
func defaultRequests(c *resourcev1.ResourceClaim) {
	def := func(mode *resourcev1.DeviceAllocationMode, count *int64) {
		if *mode == "" {
			*mode = resourcev1.DeviceAllocationModeExactCount
		}
		if *mode == resourcev1.DeviceAllocationModeExactCount && *count == 0 {
			*count = 1
		}
	}
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			def(&r.Exactly.AllocationMode, &r.Exactly.Count)
		}
		for j := range r.FirstAvailable {
			def(&r.FirstAvailable[j].AllocationMode, &r.FirstAvailable[j].Count)
		}
	}
}
