package trace

import (
	"errors"
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Run traces pkt through dump (iptables-save output of the nat and filter
// tables, from fakeiptables or the kernel) on node. It is Load then
// Rules.Run.
func Run(dump string, pkt Packet, node Node) (Result, error) {
	if !pkt.Destination.IsValid() {
		return Result{}, errors.New("trace: the packet has no destination")
	}
	rs, err := Load(dump, ipfamily.Of(pkt.Destination))
	if err != nil {
		return Result{}, fmt.Errorf("trace: %w", err)
	}
	return rs.Run(pkt, node)
}

// Run traces pkt, a packet of the dump's family, on node.
func (rs *Rules) Run(pkt Packet, node Node) (Result, error) {
	if err := rs.check(pkt); err != nil {
		return Result{}, fmt.Errorf("trace: %w", err)
	}
	if err := node.check(rs.fam); err != nil {
		return Result{}, fmt.Errorf("trace: Node: %w", err)
	}
	t := &tracer{rs: rs, node: node}
	start := flow{pkt: pkt, dst: pkt.Destination, dport: pkt.DestinationPort, mark: pkt.Mark, prob: 1}
	var err error
	switch pkt.Entry {
	case Forwarded:
		err = t.forwarded(start)
	case Local:
		err = t.local(start)
	}
	if err != nil {
		return Result{}, fmt.Errorf("trace %s %s packet %s -> %s: %w", pkt.Entry, pkt.Protocol,
			pkt.Source, netip.AddrPortFrom(pkt.Destination, pkt.DestinationPort), err)
	}
	return t.result(), nil
}

func (rs *Rules) check(pkt Packet) error {
	switch {
	case !pkt.Source.IsValid() || !pkt.Destination.IsValid():
		return errors.New("the packet needs a source and a destination")
	case ipfamily.Of(pkt.Source) != rs.fam || ipfamily.Of(pkt.Destination) != rs.fam:
		return fmt.Errorf("the packet %s -> %s is not of the dump's family %s", pkt.Source, pkt.Destination, rs.fam)
	case pkt.Protocol != "tcp" && pkt.Protocol != "udp" && pkt.Protocol != "sctp":
		return fmt.Errorf("protocol %q: want tcp, udp or sctp", pkt.Protocol)
	case pkt.DestinationPort == 0:
		return errors.New("the packet needs a destination port")
	case pkt.Entry != Forwarded && pkt.Entry != Local:
		return errors.New("the packet needs an Entry (Forwarded or Local)")
	case pkt.Entry == Local && pkt.BridgePort != "":
		return errors.New("a Local packet has no BridgePort: it crossed no bridge")
	}
	return nil
}

// tracer collects the paths of one packet.
type tracer struct {
	rs    *Rules
	node  Node
	paths []Path
}

// forwarded: nat PREROUTING, then FORWARD or, for a local destination,
// filter INPUT and IPVS. What IPVS sends to a real server elsewhere is sent
// again from LOCAL_OUT (filter OUTPUT, nat POSTROUTING; nat OUTPUT has
// already been decided for the connection); anything else goes on to nat
// INPUT and is delivered.
func (t *tracer) forwarded(f flow) error {
	flows, err := t.hook("nat", "PREROUTING", []flow{f})
	if err != nil {
		return err
	}
	for _, f := range flows {
		if !t.node.isLocal(f.dst) {
			if err := t.steps([]flow{f}, false, step{"filter", "FORWARD"}, step{"nat", "POSTROUTING"}); err != nil {
				return err
			}
			continue
		}
		in, err := t.hook("filter", "INPUT", []flow{f})
		if err != nil {
			return err
		}
		for _, f := range in {
			for _, g := range t.ipvs(f) {
				steps := []step{{"nat", "INPUT"}}
				if !t.node.isLocal(g.dst) {
					steps = []step{{"filter", "OUTPUT"}, {"nat", "POSTROUTING"}}
				}
				if err := t.steps([]flow{g}, t.node.isLocal(g.dst), steps...); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// local: nat OUTPUT, IPVS, filter OUTPUT, nat POSTROUTING, and filter
// INPUT for a local destination.
func (t *tracer) local(f flow) error {
	flows, err := t.hook("nat", "OUTPUT", []flow{f})
	if err != nil {
		return err
	}
	for _, f := range flows {
		for _, g := range t.ipvs(f) {
			steps := []step{{"filter", "OUTPUT"}, {"nat", "POSTROUTING"}}
			if t.node.isLocal(g.dst) {
				steps = append(steps, step{"filter", "INPUT"})
			}
			if err := t.steps([]flow{g}, t.node.isLocal(g.dst), steps...); err != nil {
				return err
			}
		}
	}
	return nil
}

// step is one built-in chain a packet passes.
type step struct{ table, chain string }

// steps walks flows through steps and records the paths that come out
// accepted.
func (t *tracer) steps(flows []flow, delivered bool, steps ...step) error {
	for _, s := range steps {
		var err error
		if flows, err = t.hook(s.table, s.chain, flows); err != nil {
			return err
		}
	}
	for _, f := range flows {
		t.paths = append(t.paths, f.path(Accepted, delivered))
	}
	return nil
}

// hook walks one built-in chain for each flow, records the paths it drops
// or rejects, and returns the flows it accepts.
func (t *tracer) hook(tableName, chainName string, flows []flow) ([]flow, error) {
	tbl, ok := t.rs.tables[tableName]
	if !ok {
		return flows, nil // a table never written accepts everything
	}
	c, ok := tbl.chains[chainName]
	if !ok || !c.builtin {
		return nil, fmt.Errorf("table %s has no built-in chain %s", tableName, chainName)
	}
	w := &walker{t: tbl, hook: chainName, node: t.node}
	var out []flow
	for _, f := range flows {
		f.in, f.out = t.interfaces(chainName, f)
		ends, err := w.walk(chainName, 0, f)
		if err != nil {
			return nil, err
		}
		for _, e := range ends {
			end := e.end
			if end == returned {
				end = accept
				if c.policy == "DROP" {
					end = drop
				}
				e.f = e.f.matched(fmt.Sprintf("%s: %s policy %s", tableName, chainName, c.policy))
			}
			switch end {
			case accept:
				out = append(out, e.f)
			case drop:
				t.paths = append(t.paths, e.f.path(Dropped, false))
			case reject:
				t.paths = append(t.paths, e.f.path(Rejected, false))
			}
		}
	}
	return out, nil
}

// interfaces says which input and output interfaces a hook sees.
func (t *tracer) interfaces(hook string, f flow) (in, out string) {
	known := func(name string) string {
		if name == "" {
			return unknownInterface
		}
		return name
	}
	toLocal := t.node.isLocal(f.dst)
	switch {
	case hook == "PREROUTING" || (hook == "INPUT" && f.pkt.Entry == Forwarded):
		return known(f.pkt.InInterface), ""
	case hook == "INPUT":
		return "lo", ""
	case hook == "FORWARD":
		return known(f.pkt.InInterface), known(f.pkt.OutInterface)
	case toLocal:
		return "", "lo"
	}
	return "", known(f.pkt.OutInterface)
}

func (t *tracer) result() Result {
	r := Result{Paths: t.paths}
	for i, p := range t.paths {
		if i == 0 {
			r.Verdict = p.Verdict
		} else if p.Verdict != r.Verdict {
			r.Verdict = Mixed
		}
	}
	return r
}
