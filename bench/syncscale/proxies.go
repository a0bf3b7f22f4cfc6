package syncscale

import (
	"time"
)

// Where both proxies serve: the row's namespace is fresh, so kube-proxy's
// default ports are free, and only one proxy runs at a time.
const (
	MetricsAddr = "127.0.0.1:10249"
	HealthzAddr = "127.0.0.1:10256"
	MetricsURL  = "http://" + MetricsAddr + "/metrics"
	// NodeName is the lab node both proxies run as.
	NodeName = "node-a"
)

// ProxyFlags are the command-line flags kproxy and kube-proxy both get in
// mode m: kproxy takes kube-proxy's flags, so the two run with the same
// settings.
func ProxyFlags(kubeconfig string, m Mode, minSync time.Duration) []string {
	flags := []string{
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + NodeName,
		"--proxy-mode=" + m.ProxyMode(),
		// nf_conntrack_max cannot be set from a network namespace; 0 leaves it.
		"--conntrack-max-per-core=0",
		// kube-proxy v1.36 has no --nftables-min-sync-period: its
		// nftables mode takes the iptables one, and kproxy does too.
		"--iptables-min-sync-period=" + minSync.String(),
		"--metrics-bind-address=" + MetricsAddr,
		"--healthz-bind-address=" + HealthzAddr,
	}
	if portals, ok := m.Portals(); ok {
		flags = append(flags, "--userspace-portals="+portals)
	}
	return flags
}
