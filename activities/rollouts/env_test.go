package rollouts

import (
	"testing"

	"go.temporal.io/sdk/testsuite"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/activities/activitytest"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// activityEnv runs the activities in the SDK's activity test environment against a fake clientset
// holding objs. These are narrow tests of each outcome; the e2e suite runs them on a real apiserver.
func activityEnv(t *testing.T, objs ...runtime.Object) (*testsuite.TestActivityEnvironment, *Activities, *fake.Clientset) {
	kube := fake.NewClientset(objs...)
	a := &Activities{Kube: kube, Metrics: metrics.New()}
	return activitytest.Env(a), a, kube
}
