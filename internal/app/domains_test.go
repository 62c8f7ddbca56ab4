package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// A reset domain is checked against what the driver publishes as the process starts: an attribute
// none of its devices has is said, with what to do, and the process starts.
func TestAResetDomainItsDriverDoesNotPublishIsSaid(t *testing.T) {
	set, err := policy.Parse([]byte("drivers:\n  amd.com: {identity: [uuid], resetDomain: \"attribute:hive\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-amd"}, Spec: resourcev1.ResourceSliceSpec{Driver: "amd.com",
		Pool: resourcev1.ResourcePool{Name: "node-1"}, Devices: []resourcev1.Device{{Name: "gpu-0",
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"uuid": {}, "xgmiGroup": {}}}}}}
	var out strings.Builder
	logger := slog.New(slog.NewTextHandler(&out, nil))
	if err := checkDomains(context.Background(), fake.NewClientset(slice), set, logger); err != nil || !strings.Contains(out.String(), `has attribute \"hive\"`) {
		t.Fatalf("a hive attribute amd.com does not publish: %v, said %q", err, out.String())
	}
	out.Reset()
	slice.Spec.Devices[0].Attributes["amd.com/hive"] = resourcev1.DeviceAttribute{}
	if err := checkDomains(context.Background(), fake.NewClientset(slice), set, logger); err != nil || out.Len() > 0 {
		t.Fatalf("%v, said %q", err, out.String())
	}
}
