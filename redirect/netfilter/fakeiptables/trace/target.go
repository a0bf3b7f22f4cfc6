package trace

import (
	"fmt"
	"net/netip"
	"slices"

	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/internal/rulespec"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// target applies a matched rule's target to f.
func (w *walker) target(r *rule, f flow) ([]branch, error) {
	t := r.parsed.Target
	one := func(f flow, e ending) ([]branch, error) { return []branch{{f: f, end: e}}, nil }
	switch t.Name {
	case "":
		return one(f, next)
	case "ACCEPT":
		return one(f, accept)
	case "DROP":
		return one(f, drop)
	case "REJECT":
		return one(f, reject)
	case "RETURN":
		return one(f, returned)
	case "MARK":
		mark, err := remark(f.mark, t.Options[0])
		f.mark = mark
		return []branch{{f: f, end: next}}, err
	case "DNAT", "REDIRECT":
		if err := w.need(t.Name, "PREROUTING", "OUTPUT"); err != nil {
			return nil, err
		}
		f, err := w.rewriteDestination(t, f)
		return []branch{{f: f, end: accept}}, err
	case "MASQUERADE":
		if err := w.need(t.Name, "POSTROUTING"); err != nil {
			return nil, err
		}
		f.masquerade = true
		return one(f, accept)
	case "SNAT":
		if err := w.need(t.Name, "POSTROUTING", "INPUT"); err != nil {
			return nil, err
		}
		o, _ := rulespec.FindOption(t.Options, "--to-source")
		addr, _, err := rulespec.ParseNATAddr(o.Arg, ipfamily.Of(f.dst))
		f.snat = addr
		return []branch{{f: f, end: accept}}, err
	}
	if t.IsChain() {
		return w.jump(t.Name, t.Goto, f)
	}
	return nil, fmt.Errorf("target %s is not modelled", t.Name)
}

// need refuses a NAT target outside the nat hooks the kernel allows it in.
func (w *walker) need(target string, hooks ...string) error {
	hook := w.hook
	if w.t.name != "nat" || !slices.Contains(hooks, hook) {
		return fmt.Errorf("%s reached from %s %s; the kernel allows it only in nat %v", target, w.t.name, hook, hooks)
	}
	return nil
}

// rewriteDestination applies DNAT or REDIRECT.
func (w *walker) rewriteDestination(t rulespec.Target, f flow) (flow, error) {
	var (
		addr netip.Addr
		port uint16
		err  error
	)
	if t.Name == "DNAT" {
		o, _ := rulespec.FindOption(t.Options, "--to-destination")
		if addr, port, err = rulespec.ParseNATAddr(o.Arg, ipfamily.Of(f.dst)); err != nil {
			return f, err
		}
	} else {
		if o, ok := rulespec.FindOption(t.Options, "--to-ports"); ok {
			if port, err = rulespec.ParseToPort(o.Arg); err != nil {
				return f, err
			}
		}
		if addr, err = w.redirectAddress(f); err != nil {
			return f, err
		}
		f.redirect = true
	}
	f.dst, f.dnat = addr, true
	if port != 0 {
		f.dport = port
	}
	return f, nil
}

// redirectAddress is where REDIRECT sends a packet: loopback for one the
// node sent, else the primary address of the interface it came in on.
func (w *walker) redirectAddress(f flow) (netip.Addr, error) {
	fam := ipfamily.Of(f.dst)
	if w.hook == "OUTPUT" {
		if fam == ipfamily.Of(netip.IPv6Loopback()) {
			return netip.IPv6Loopback(), nil
		}
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
	}
	var candidates []netip.Addr
	if f.in != unknownInterface {
		candidates = w.node.Interfaces[f.in]
	}
	if len(candidates) == 0 {
		candidates = w.node.LocalAddresses
	}
	for _, a := range candidates {
		if ipfamily.Of(a) == fam {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("REDIRECT needs a local %s address of the node (in Node.LocalAddresses or Node.Interfaces)", fam)
}

// remark applies one MARK option to mark.
func remark(mark uint32, o rulespec.Option) (uint32, error) {
	value, mask, err := rulespec.ParseMark(o.Arg)
	if err != nil {
		return mark, err
	}
	switch o.Name {
	case "--set-xmark":
		return mark&^mask ^ value, nil
	case "--set-mark":
		return mark&^mask | value, nil
	case "--and-mark":
		return mark & value, nil
	case "--or-mark":
		return mark | value, nil
	case "--xor-mark":
		return mark ^ value, nil
	}
	return mark, fmt.Errorf("MARK %s is not modelled", o.Name)
}
