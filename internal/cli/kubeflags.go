package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/app"
)

// kubeFlags selects the cluster: --kubeconfig, else $KUBECONFIG, else a running local cluster.
type kubeFlags struct{ kubeconfig string }

func (k *kubeFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then the local cluster, then in-cluster)")
}

// client builds a clientset; without a kubeconfig it uses a running local cluster if there is one.
func (k *kubeFlags) client(g *globals) (kubernetes.Interface, error) {
	path := k.kubeconfig
	if path == "" {
		path = localKubeconfig(g)
	}
	cfg, err := app.KubeConfig(path)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build kubernetes client: %w", err)
	}
	return cs, nil
}

// temporalFlags selects the Temporal server: --temporal-address, or the embedded one.
type temporalFlags struct{ o app.TemporalOptions }

func (t *temporalFlags) add(cmd *cobra.Command, embedded bool) {
	f := cmd.Flags()
	addConnFlags(f, &t.o, "", "host:port of an existing Temporal frontend; empty runs the embedded server")
	if embedded {
		f.StringVar(&t.o.FrontendAddress, "temporal-listen", "127.0.0.1:7233", "embedded server: frontend listen address")
		f.StringVar(&t.o.UIAddress, "ui-listen", "127.0.0.1:8233", "embedded server: Web UI listen address (empty disables the UI)")
	}
}

// addConnFlags adds the flags that say how to reach a Temporal frontend.
func addConnFlags(f *pflag.FlagSet, o *app.TemporalOptions, defaultAddress, addressHelp string) {
	f.StringVar(&o.Address, "temporal-address", defaultAddress, addressHelp)
	f.StringVar(&o.Namespace, "temporal-namespace", "default", "Temporal namespace")
	f.StringVar(&o.TLSCert, "temporal-tls-cert", "", "client certificate file for Temporal mTLS")
	f.StringVar(&o.TLSKey, "temporal-tls-key", "", "client key file for Temporal mTLS")
	f.StringVar(&o.TLSCA, "temporal-tls-ca", "", "CA file that signed the Temporal server certificate")
	f.StringVar(&o.APIKey, "temporal-api-key", "", "API key for Temporal Cloud or a server that accepts API keys")
	f.StringVar(&o.Compression, "temporal-compression", "auto", "gzip requests to Temporal: auto (not to a loopback address, such as the embedded server), gzip or none")
}

func (t *temporalFlags) options(g *globals) (app.TemporalOptions, error) {
	o := t.o
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return o, fmt.Errorf("--temporal-tls-cert and --temporal-tls-key go together")
	}
	if o.Address == "" && (o.TLSCert != "" || o.TLSCA != "" || o.APIKey != "") {
		return o, fmt.Errorf("TLS and API-key flags need --temporal-address; the embedded server is plain loopback")
	}
	o.DBPath = filepath.Join(g.stateDir, "temporal.db")
	return o, nil
}

// reports builds the DeviceHealthReport client for the same cluster as client.
func (k *kubeFlags) reports(g *globals) (dynamic.NamespaceableResourceInterface, error) {
	path := k.kubeconfig
	if path == "" {
		path = localKubeconfig(g)
	}
	return app.ReportsClient(path)
}
