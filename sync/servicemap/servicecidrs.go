package servicemap

import (
	"net/netip"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

// ServiceCIDRSink is the optional part of a Sink that receives the
// cluster's ServiceCIDR objects (networking.k8s.io/v1): the ranges service
// cluster IPs are allocated from. kube-proxy's nftables mode drops traffic
// to addresses in them that no service holds.
type ServiceCIDRSink interface {
	// OnServiceCIDRUpdate adds or replaces one ServiceCIDR's ranges.
	OnServiceCIDRUpdate(name string, cidrs []string)
	OnServiceCIDRDelete(name string)
}

var _ ServiceCIDRSink = (*Tracker)(nil)

// OnServiceCIDRUpdate implements ServiceCIDRSink.
func (t *Tracker) OnServiceCIDRUpdate(name string, cidrs []string) {
	var ps []netip.Prefix
	for _, c := range cidrs {
		p, ok := parseCIDRSloppy(strings.TrimSpace(c))
		if !ok {
			klog.InfoS("Warning: ignoring unparseable ServiceCIDR range", "serviceCIDR", name, "cidr", c)
			continue
		}
		ps = append(ps, p.Masked())
	}
	t.setServiceCIDRs(name, ps, true)
}

// OnServiceCIDRDelete implements ServiceCIDRSink.
func (t *Tracker) OnServiceCIDRDelete(name string) { t.setServiceCIDRs(name, nil, false) }

func (t *Tracker) setServiceCIDRs(name string, ps []netip.Prefix, present bool) {
	t.mu.Lock()
	if t.serviceCIDRs == nil {
		t.serviceCIDRs = map[string][]netip.Prefix{}
	}
	old, had := t.serviceCIDRs[name]
	if had == present && slices.Equal(old, ps) {
		t.mu.Unlock()
		return
	}
	if present {
		t.serviceCIDRs[name] = ps
	} else {
		delete(t.serviceCIDRs, name)
	}
	var all []netip.Prefix
	for _, v := range t.serviceCIDRs {
		all = append(all, v...)
	}
	slices.SortFunc(all, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	all = slices.Compact(all)
	changed := !slices.Equal(all, t.allServiceCIDRs)
	if changed {
		t.allServiceCIDRs = all
		t.nodeChanged = true
		t.noteEventLocked()
	}
	t.mu.Unlock()
	t.notify(changed)
}
