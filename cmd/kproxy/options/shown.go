package options

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
)

// AsKubeProxyShows returns fc's KubeProxyConfiguration as kube-proxy v1.36
// shows its own on /configz. kube-proxy keeps one internal sync period pair
// and converts it back into the running mode's section only (ipvs,
// nftables, else iptables), leaving the other sections' periods at 0s;
// kproxy keeps each section's periods, which its modes read (the IPVS and
// nftables ones filled from defaults or the iptables flags as kube-proxy
// fills its one pair), so only what is shown changes. Likewise the nftables
// mode's default nodePortAddresses, which kube-proxy writes into its
// configuration as ["primary"] and kproxy resolves later (the same meaning).
func AsKubeProxyShows(fc *FileConfiguration) kubeproxyconfig.KubeProxyConfiguration {
	c := *fc.KubeProxyConfiguration.DeepCopy()
	var zero metav1.Duration
	if c.Mode != "ipvs" {
		c.IPVS.SyncPeriod, c.IPVS.MinSyncPeriod = zero, zero
	}
	if c.Mode != "nftables" {
		c.NFTables.SyncPeriod, c.NFTables.MinSyncPeriod = zero, zero
	}
	if c.Mode == "ipvs" || c.Mode == "nftables" {
		c.IPTables.SyncPeriod, c.IPTables.MinSyncPeriod = zero, zero
	}
	if c.Mode == "nftables" && len(c.NodePortAddresses) == 0 {
		c.NodePortAddresses = []string{"primary"}
	}
	return c
}

// AsKubeProxyWrites returns fc as kube-proxy v1.36 writes its own with
// --write-config-to: AsKubeProxyShows, and kproxy's own fields only where a
// file or flag set them (kube-proxy warns about fields it does not know).
// Read back with --config it runs the same (the sections other than the
// mode's are not used, and their 0s read back as the defaults).
//
// The one line that differs is an unset mode: kube-proxy writes its
// default, iptables; kproxy writes mode: "". kube-proxy reads "" as
// iptables, so the file means the same to it, and kproxy keeps its
// automatic choice (iptables where the kernel can, else userspace) on
// whichever node reads the file; mode: iptables would make kproxy fail on
// a node without netfilter instead. Deciding at write time would need a
// probe of the kernel, which --write-config-to does not touch.
func AsKubeProxyWrites(fc *FileConfiguration) *FileConfiguration {
	out := *fc
	out.KubeProxyConfiguration = AsKubeProxyShows(fc)
	return &out
}
