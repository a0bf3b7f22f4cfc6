package kernelmode

import (
	"iter"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// UsableIPTables yields each family whose chosen iptables backend the
// kernel probe found usable, with that backend's abilities, for the modes
// writing iptables rules. An unusable IPv6 is logged, as the mode then
// proxies IPv4 only; the modes' Missing refuses them without IPv4.
func UsableIPTables(f kernel.Features, logger klog.Logger) iter.Seq2[ipfamily.Family, kernel.IPTables] {
	return func(yield func(ipfamily.Family, kernel.IPTables) bool) {
		for _, fam := range ipfamily.All() {
			ipt := f.Chosen(fam)
			if !ipt.Usable {
				if fam == ipfamily.IPv6 {
					logger.Info("IPv6 iptables is not usable; proxying IPv4 only", "backend", f.Backend, "problem", ipt.Problem)
				}
				continue
			}
			if !yield(fam, ipt) {
				return
			}
		}
	}
}
