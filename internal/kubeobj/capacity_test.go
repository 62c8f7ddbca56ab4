package kubeobj

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestCapacityCluster(t *testing.T) {
	name := metav1.ObjectMeta{Name: "a"}
	objs := []runtime.Object{&corev1.Node{ObjectMeta: name}, &resourcev1.ResourceSlice{ObjectMeta: name},
		&resourcev1.DeviceClass{ObjectMeta: name}, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "t"}},
		&resourcev1.DeviceTaintRule{ObjectMeta: name}}
	c, err := CapacityCluster(context.Background(), fake.NewClientset(objs...))
	if err != nil || len(c.Nodes) != 1 || len(c.Slices) != 1 || len(c.Classes) != 1 || len(c.Claims) != 1 || len(c.TaintRules) != 1 {
		t.Fatalf("cluster = %+v %v", c, err)
	}
	for _, res := range []string{"nodes", "resourceslices", "deviceclasses", "resourceclaims", "devicetaintrules"} {
		broken := fake.NewClientset(objs...)
		broken.PrependReactor("list", res, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("apiserver unavailable")
		})
		if _, err := CapacityCluster(context.Background(), broken); err == nil || !strings.Contains(err.Error(), "apiserver unavailable") {
			t.Errorf("%s: %v", res, err)
		}
	}
}
