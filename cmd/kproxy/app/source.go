package app

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	componentconfig "k8s.io/component-base/config/v1alpha1"

	"kproxy.dev/kproxy/cmd/kproxy/options"
	"kproxy.dev/kproxy/sync/clustersource"
	"kproxy.dev/kproxy/sync/filesource"
	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/servicemap"
)

// nodeIPWait is how long kube-proxy's NodeManager waits at start for the
// Node object's addresses.
const nodeIPWait = 30 * time.Second

// podCIDRWait is how long it waits for the pod CIDRs with
// --detect-local-mode=NodeCIDR.
const podCIDRWait = 5 * time.Minute

// source is where Services and EndpointSlices come from.
type source struct {
	describe string
	Run      func(ctx context.Context) error
	// client is the cluster's (nil for a services file): events go there.
	client kubernetes.Interface
}

// newSource picks the services file when one is given, else the cluster
// (kubeconfig, --master, or in-cluster config).
func newSource(ctx context.Context, cfg *options.Config, sink servicemap.Sink, m *metrics.Metrics) (*source, error) {
	if cfg.ServicesFile != "" {
		fs, err := filesource.New(cfg.ServicesFile, cfg.NodeName, sink, m.Registry())
		if err != nil {
			return nil, fmt.Errorf("--services-file: %w", err)
		}
		return &source{describe: "services file " + cfg.ServicesFile, Run: fs.Run}, nil
	}
	client, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	cs := clustersource.New(client, cfg.NodeName, cfg.ConfigSyncPeriod, sink)
	// kube-proxy watches ServiceCIDRs unless this (GA, default on) gate is off.
	if on, set := cfg.FeatureGates["MultiCIDRServiceAllocator"]; set && !on {
		cs.WatchServiceCIDRs = false
	}
	if cfg.NodePortPrimary {
		// "primary" reads the Node object: the first sync waits for it as
		// kube-proxy's start does, so NodePorts never open everywhere first.
		cs.NodeWait = nodeIPWait
	}
	if cfg.DetectLocalMode == "NodeCIDR" {
		// kube-proxy waits for the Node's pod CIDRs too (up to 5 minutes,
		// then fails; kproxy syncs without a detector and logs it).
		cs.NodeWait = podCIDRWait
		cs.NodeReady = func(n *v1.Node) bool {
			return clustersource.HasNodeIP(n) && (len(n.Spec.PodCIDRs) > 0 || n.Spec.PodCIDR != "")
		}
	}
	return &source{describe: "cluster", Run: cs.Run, client: client}, nil
}

// newClient is the cluster's client (kubeconfig, --master, or in-cluster
// config).
func newClient(cfg *options.Config) (kubernetes.Interface, error) {
	return clustersource.NewClient(componentconfig.ClientConnectionConfiguration{
		Kubeconfig:  cfg.Kubeconfig,
		ContentType: cfg.ContentType,
		QPS:         cfg.QPS,
		Burst:       cfg.Burst,
	}, cfg.Master)
}
