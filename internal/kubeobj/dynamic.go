package kubeobj

import (
	"errors"
	"strings"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Dynamic is a client for objects of any kind (a node remediator's, say) on the clientset's own
// connection: its address, TLS and credentials. It fails for a clientset with no connection (a
// fake one): give such code a dynamic fake instead.
func Dynamic(kube kubernetes.Interface) (dynamic.Interface, error) {
	rc, ok := kube.Discovery().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil || rc.Client == nil {
		return nil, errors.New("the kubernetes client has no connection to reach objects of other kinds through")
	}
	u := rc.Get().URL()
	return dynamic.NewForConfigAndClient(&rest.Config{Host: u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")}, rc.Client)
}
