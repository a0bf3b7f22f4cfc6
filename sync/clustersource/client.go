package clustersource

import (
	"cmp"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	componentconfig "k8s.io/component-base/config/v1alpha1"
)

// DefaultClientConnection is KubeProxyConfiguration's clientConnection with
// kube-proxy's defaults: protobuf on the wire, 5 queries/s, bursts of 10.
func DefaultClientConnection() componentconfig.ClientConnectionConfiguration {
	return componentconfig.ClientConnectionConfiguration{
		ContentType: "application/vnd.kubernetes.protobuf",
		QPS:         5,
		Burst:       10,
	}
}

// RESTConfig builds a client config the way kube-proxy does: from the
// kubeconfig file if one is given, with master (--master) overriding its
// server URL; from master alone; or, when both are empty, from the in-cluster
// service account.
func RESTConfig(kubeconfig, master string) (*rest.Config, error) {
	if kubeconfig == "" && master == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("neither --kubeconfig nor --master given, and in-cluster config failed: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{ClusterInfo: clientcmdapi.Cluster{Server: master}},
	).ClientConfig()
	if err != nil {
		switch {
		case kubeconfig == "":
			return nil, fmt.Errorf("building client config for --master %q: %w", master, err)
		case master == "":
			return nil, fmt.Errorf("loading kubeconfig %q: %w", kubeconfig, err)
		default:
			return nil, fmt.Errorf("loading kubeconfig %q with --master %q: %w", kubeconfig, master, err)
		}
	}
	return cfg, nil
}

// ApplyClientConnection copies content types and rate limits into cfg.
// Zero ContentType, QPS or Burst take kube-proxy's defaults, so a
// half-filled configuration behaves like a defaulted one.
func ApplyClientConnection(cfg *rest.Config, cc componentconfig.ClientConnectionConfiguration) {
	def := DefaultClientConnection()
	cc.ContentType = cmp.Or(cc.ContentType, def.ContentType)
	cc.QPS = cmp.Or(cc.QPS, def.QPS)
	cc.Burst = cmp.Or(cc.Burst, def.Burst)
	cfg.AcceptContentTypes = cc.AcceptContentTypes
	cfg.ContentType = cc.ContentType
	cfg.QPS = cc.QPS
	cfg.Burst = int(cc.Burst)
}

// NewClient builds a clientset from cc.Kubeconfig and master as RESTConfig
// does, with cc's connection settings applied.
func NewClient(cc componentconfig.ClientConnectionConfiguration, master string) (kubernetes.Interface, error) {
	cfg, err := RESTConfig(cc.Kubeconfig, master)
	if err != nil {
		return nil, err
	}
	ApplyClientConnection(cfg, cc)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating clientset for %s: %w", cfg.Host, err)
	}
	return client, nil
}
