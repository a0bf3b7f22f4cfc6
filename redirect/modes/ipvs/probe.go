package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// probeKey is the scheduler probe's virtual service, which exists for an
// instant: TEST-NET-1 (RFC 5737) is never a node's or a service's address,
// so no packet can reach it, and a probe a killed process left behind is
// removed by the next probe or the first sync.
func probeKey() desired.Key {
	return desired.Key{Addr: netip.AddrFrom4([4]byte{192, 0, 2, 1}), Protocol: v1.ProtocolTCP, Port: 1}
}

// ProbeScheduler creates and deletes a virtual service with scheduler
// ("" is desired.DefaultScheduler), so that a scheduler the kernel lacks
// fails at start, named, rather than on every sync.
func ProbeScheduler(h handles.IPVS, scheduler string) error {
	if scheduler == "" {
		scheduler = desired.DefaultScheduler
	}
	vs := desired.VirtualServer{Key: probeKey(), Scheduler: scheduler}
	svc := handles.ToService(vs)
	if err := h.DelService(svc); err != nil && !handles.IsNoService(err) {
		return fmt.Errorf("removing an old IPVS probe virtual service %s: %w", vs.Key, err)
	}
	if err := h.NewService(svc); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("--ipvs-scheduler=%s is not usable: the kernel has no IPVS scheduler %q (module ip_vs_%s); "+
				"rr, the default, works wherever IPVS does: %w", scheduler, scheduler, scheduler, err)
		}
		return fmt.Errorf("creating a probe IPVS virtual service %s with scheduler %q: %w", vs.Key, scheduler, err)
	}
	if err := h.DelService(svc); err != nil {
		return fmt.Errorf("deleting the probe IPVS virtual service %s: %w", vs.Key, err)
	}
	return nil
}
