package capacity

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
)

// ReadCluster lists what a what-if needs.
func ReadCluster(ctx context.Context, cs kubernetes.Interface) (Cluster, error) {
	var c Cluster
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		c.Nodes = append(c.Nodes, &nodes.Items[i])
	}
	slices, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list resource slices: %w", err)
	}
	for i := range slices.Items {
		c.Slices = append(c.Slices, &slices.Items[i])
	}
	classes, err := cs.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list device classes: %w", err)
	}
	for i := range classes.Items {
		c.Classes = append(c.Classes, &classes.Items[i])
	}
	claims, err := cs.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list resource claims: %w", err)
	}
	for i := range claims.Items {
		c.Claims = append(c.Claims, &claims.Items[i])
	}
	rules, err := cs.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list device taint rules: %w", err)
	}
	for i := range rules.Items {
		c.TaintRules = append(c.TaintRules, &rules.Items[i])
	}
	return c, nil
}

// LoadClaims reads ResourceClaims from a YAML file (documents separated by ---); each must name
// its requests. Claims without a UID get one, so shares can be told apart.
func LoadClaims(path string) ([]*resourcev1.ResourceClaim, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read claims: %w", err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*resourcev1.ResourceClaim
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("claims %s: document %d: %w", path, i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var c resourcev1.ResourceClaim
		if err := utilyaml.UnmarshalStrict(doc, &c); err != nil {
			return nil, fmt.Errorf("claims %s: document %d: %w", path, i, err)
		}
		if c.Kind != "" && c.Kind != "ResourceClaim" {
			return nil, fmt.Errorf("claims %s: document %d is a %s, want ResourceClaim", path, i, c.Kind)
		}
		if len(c.Spec.Devices.Requests) == 0 {
			return nil, fmt.Errorf("claims %s: document %d (%s) has no device requests", path, i, c.Name)
		}
		if c.UID == "" {
			c.UID = types.UID(fmt.Sprintf("what-if-%d", i))
		}
		defaultRequests(&c)
		out = append(out, &c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("claims %s: no ResourceClaim in it", path)
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
