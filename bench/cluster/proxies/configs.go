package proxies

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"kproxy.dev/kproxy/bench/cluster"
)

// Proxy programs.
const (
	Kproxy    = "kproxy"
	KubeProxy = "kube-proxy"
)

// Images the DaemonSets name: deploy/base/kproxy.yaml's, and the reference
// kube-proxy's (make kube-proxy-image).
const (
	KproxyImage    = "localhost/kproxy:latest"
	KubeProxyImage = "localhost/kube-proxy:v1.36.3"
)

// Config is one node proxy configuration the cluster can run.
type Config struct {
	// Name identifies it in the selection and the report: PROXY-MODE[-VARIANT].
	Name string
	// Proxy is Kproxy or KubeProxy.
	Proxy string
	// Mode is the KubeProxyConfiguration's mode.
	Mode string
	// Portals is kproxy's userspacePortals, for the userspace mode.
	Portals string
	// Legacy makes the node an iptables-legacy node before the proxy
	// starts (see legacyInit): kproxy follows the backend the node's rules
	// are in, as kube-proxy's image does through its iptables wrapper.
	Legacy bool
	// NotRun, if set, says why this kernel cannot run the configuration.
	NotRun string
}

// ipvsProbe is where a kernel with IPVS shows its connection table.
const ipvsProbe = "/proc/net/ip_vs"

// All is every configuration, in the order a run takes them; the IPVS
// ones carry NotRun when the kernel has no IPVS.
func All() []Config {
	noIPVS := ""
	if _, err := os.Stat(ipvsProbe); err != nil {
		noIPVS = "not run: no IPVS in this kernel (no " + ipvsProbe + ")"
	}
	return []Config{
		{Name: "kproxy-iptables", Proxy: Kproxy, Mode: "iptables"},
		{Name: "kproxy-iptables-legacy", Proxy: Kproxy, Mode: "iptables", Legacy: true},
		{Name: "kproxy-nftables", Proxy: Kproxy, Mode: "nftables"},
		{Name: "kproxy-userspace-redirect", Proxy: Kproxy, Mode: "userspace", Portals: "redirect"},
		{Name: "kproxy-userspace-local", Proxy: Kproxy, Mode: "userspace", Portals: "local"},
		{Name: "kproxy-userspace-sklookup", Proxy: Kproxy, Mode: "userspace", Portals: "sklookup"},
		{Name: "kproxy-ipvs", Proxy: Kproxy, Mode: "ipvs", NotRun: noIPVS},
		{Name: "kube-proxy-iptables", Proxy: KubeProxy, Mode: "iptables"},
		{Name: "kube-proxy-nftables", Proxy: KubeProxy, Mode: "nftables"},
		{Name: "kube-proxy-ipvs", Proxy: KubeProxy, Mode: "ipvs", NotRun: noIPVS},
	}
}

// Select picks configurations by name from all, in all's order: a
// comma-separated list, or "" or "all" for every one.
func Select(all []Config, list string) ([]Config, error) {
	list = strings.TrimSpace(list)
	if list == "" || list == "all" {
		return all, nil
	}
	want := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name != "" {
			want[name] = true
		}
	}
	var out []Config
	for _, c := range all {
		if want[c.Name] {
			out = append(out, c)
			delete(want, c.Name)
		}
	}
	if len(want) > 0 {
		var unknown, known []string
		for name := range want {
			unknown = append(unknown, name)
		}
		for _, c := range all {
			known = append(known, c.Name)
		}
		return nil, fmt.Errorf("unknown proxy configurations %s (known: %s)", strings.Join(slices.Sorted(slices.Values(unknown)), ","), strings.Join(known, ","))
	}
	return out, nil
}

// evidence is a command to run on a node and what its output holds once
// cfg's proxy has synced the cluster's Services there.
func (c Config) evidence() (argv []string, want string) {
	switch {
	case c.Mode == "ipvs":
		// Both proxies hold the service addresses on this dummy link.
		return []string{"ip", "address", "show", "dev", "kube-ipvs0"}, cluster.KubernetesServiceIP + "/32"
	case c.Mode == "nftables":
		return []string{"nft", "list", "table", "ip", "kube-proxy"}, "chain services"
	case c.Mode == "iptables" && c.Legacy:
		return []string{"iptables-legacy-save", "-t", "nat"}, "-j KUBE-SERVICES"
	case c.Mode == "iptables":
		return []string{"iptables-nft-save", "-t", "nat"}, "-j KUBE-SERVICES"
	case c.Mode == "userspace" && c.Portals == "redirect":
		return []string{"iptables-nft-save", "-t", "nat"}, "-j KUBE-PORTALS-CONTAINER"
	case c.Mode == "userspace":
		// Local and socket-lookup portals make the service addresses local
		// with routes of kproxy's protocol.
		return []string{"ip", "route", "show", "table", "local", "proto", "107"}, "local " + cluster.KubernetesServiceIP + " "
	}
	return []string{"true"}, ""
}
