package rules

import (
	"errors"
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/redirect/netfilter/nfacct"

	"kproxy.dev/kproxy/sync/servicemap"
)

// ForPort returns everything sp contributes for the Builder's family: its
// own chains (KUBE-SEP-*, KUBE-SVC-*, KUBE-SVL-*, KUBE-EXT-*, KUBE-FW-*)
// and its rules in the shared chains, as kube-proxy v1.36 writes them. A
// port without a cluster IP of the family contributes nothing (each family
// is programmed separately). A port the model cannot express returns an
// error naming it.
func (b *Builder) ForPort(sp *servicemap.ServicePort) (PortRules, error) {
	if sp == nil {
		return PortRules{}, errors.New("building iptables rules: service port is nil")
	}
	out := PortRules{Name: sp.Name}
	p, ok, err := b.plan(sp)
	if err != nil {
		return out, fmt.Errorf("building %s iptables rules for service port %s: %w", b.cfg.Family, sp.Name, err)
	}
	if !ok {
		return out, nil
	}
	t := b.getText()
	defer b.putText(t)
	w := portWriter{b: b, p: &p, t: t}
	w.sharedRules()
	w.endpointChains()
	w.serviceChains()
	w.externalChain()
	w.firewallChain()
	return w.finish(out), nil
}

// portWriter writes one planned port's rules into a portText.
type portWriter struct {
	b *Builder
	p *portPlan
	t *portText
}

// finish turns the drafts into out's chains and shared rules.
func (w *portWriter) finish(out PortRules) PortRules {
	pieces := w.t.strings()
	if len(w.t.chains) > 0 {
		out.Chains = make([]Chain, len(w.t.chains))
		for i, d := range w.t.chains {
			out.Chains[i] = Chain{Table: d.table, Name: pieces[d.name], Rules: pieces[d.first:d.last:d.last]}
		}
	}
	if len(w.t.shared) > 0 {
		out.Shared = make([]SharedRule, len(w.t.shared))
		for i, d := range w.t.shared {
			out.Shared[i] = SharedRule{Table: d.table, Chain: d.chain, Rule: pieces[d.rule]}
		}
	}
	return out
}

// sharedRules writes the port's rules in the shared chains, in kube-proxy's
// order: cluster IP, external IPs, LoadBalancer IPs, NodePort, health
// check node port.
func (w *portWriter) sharedRules() {
	p := w.p
	if p.hasInternal {
		w.serviceIPRule(p.clusterIP, " cluster IP", w.internalChain())
	} else {
		w.refusal(Services, p.clusterIP)
	}

	for _, ip := range p.externalIPs {
		if p.hasEndpoints {
			w.serviceIPRule(ip, " external IP", chainRef{ExternalPrefix, &p.hash})
		}
		if !p.hasExternal {
			w.refusal(ExternalServices, ip)
		}
	}

	fw := chainRef{FirewallPrefix, &p.hash}
	lbTarget := chainRef{ExternalPrefix, &p.hash}
	if p.usesFirewallChain {
		lbTarget = fw
	}
	for _, ip := range p.lbIPs {
		if p.hasEndpoints {
			w.serviceIPRule(ip, " loadbalancer IP", lbTarget)
		}
		if p.usesFirewallChain {
			// What KUBE-FW let through was DNATed before the filter
			// table sees it; what reaches this rule was not allowed.
			w.t.word("-d").host(ip, w.b.hostBits).word("-p").word(p.proto)
			c := w.t.openComment()
			w.t.s(p.name).s(" traffic not accepted by ").name(fw).closeComment(c).
				word("-m").word(p.proto).word("--dport").uint(uint64(p.port)).s("-j DROP")
			w.shared(Filter, ProxyFirewall)
		}
	}
	if !p.hasExternal {
		for _, ip := range p.lbIPs {
			w.refusal(ExternalServices, ip)
		}
	}

	if p.nodePort != 0 {
		if p.hasEndpoints && w.b.localhostNodePorts && w.b.cfg.NFAcct.LocalhostNodePortsAccepted {
			// Only counts: the same jump for loopback destinations,
			// first, so kube-proxy's metric sees them. Two spaces
			// before the name, as iptables-save prints it.
			w.t.s("-d 127.0.0.0/8 ").word("-p").word(p.proto).comment(p.name).
				word("-m").word(p.proto).word("--dport").uint(uint64(p.nodePort)).
				s("-m nfacct --nfacct-name  " + nfacct.LocalhostNodePortAccept + " ").
				word("-j").chain(chainRef{ExternalPrefix, &p.hash})
			w.shared(NAT, NodePorts)
		}
		if p.hasEndpoints {
			w.t.word("-p").word(p.proto).comment(p.name).
				word("-m").word(p.proto).word("--dport").uint(uint64(p.nodePort)).
				word("-j").chain(chainRef{ExternalPrefix, &p.hash})
			w.shared(NAT, NodePorts)
		}
		if !p.hasExternal {
			r := w.refusalVerdict()
			w.t.word("-p").word(p.proto).comment(r.comment...).s("-m addrtype --dst-type LOCAL ").
				word("-m").word(p.proto).word("--dport").uint(uint64(p.nodePort)).s("-j ").s(r.target)
			w.shared(Filter, ExternalServices)
		}
	}

	if p.healthCheckNodePort != 0 {
		// Load balancers probe it whether or not this node has endpoints.
		w.t.s("-p tcp ").comment(p.name, " health check node port").
			s("-m tcp --dport ").uint(uint64(p.healthCheckNodePort)).s("-j ACCEPT")
		w.shared(Filter, NodePorts)
	}
}

// serviceIPRule writes a nat KUBE-SERVICES rule capturing ip:port.
func (w *portWriter) serviceIPRule(ip netip.Addr, what string, target chainRef) {
	p := w.p
	w.t.word("-d").host(ip, w.b.hostBits).word("-p").word(p.proto).comment(p.name, what).
		word("-m").word(p.proto).word("--dport").uint(uint64(p.port)).word("-j").chain(target)
	w.shared(NAT, Services)
}

// refusalRule is the verdict of a filter rule for traffic that has
// nowhere to go, and the comment saying why.
type refusalRule struct {
	comment []string
	target  string
}

// refusalVerdict: REJECT when the service has no endpoints at all, DROP
// when a Local traffic policy finds none on this node (there are some
// elsewhere, so a refusal would mislead the client).
func (w *portWriter) refusalVerdict() refusalRule {
	if !w.p.hasEndpoints {
		return refusalRule{[]string{w.p.name, " has no endpoints"}, "REJECT --reject-with " + w.b.rejectWith}
	}
	return refusalRule{[]string{w.p.name, " has no local endpoints"}, "DROP"}
}

// refusal writes a filter rule refusing traffic to ip and the service port.
func (w *portWriter) refusal(chain string, ip netip.Addr) {
	r := w.refusalVerdict()
	w.t.word("-d").host(ip, w.b.hostBits).word("-p").word(w.p.proto).comment(r.comment...).
		word("-m").word(w.p.proto).word("--dport").uint(uint64(w.p.port)).s("-j ").s(r.target)
	w.shared(Filter, chain)
}

// internalChain is where cluster IP traffic goes: the policy chain of
// internalTrafficPolicy.
func (w *portWriter) internalChain() chainRef {
	if w.p.internalLocal {
		return chainRef{LocalServicePrefix, &w.p.hash}
	}
	return chainRef{ServicePrefix, &w.p.hash}
}

// externalPolicyChain is where external traffic from outside the node goes
// after KUBE-EXT.
func (w *portWriter) externalPolicyChain() chainRef {
	if w.p.externalLocal {
		return chainRef{LocalServicePrefix, &w.p.hash}
	}
	return chainRef{ServicePrefix, &w.p.hash}
}

// shared closes the piece being written as a rule of a shared chain.
func (w *portWriter) shared(table Table, chain string) {
	w.t.shared = append(w.t.shared, sharedDraft{table: table, chain: chain, rule: w.t.end()})
}

// beginChain writes the chain's name as a piece; the pieces up to
// endChain are its rules.
func (w *portWriter) beginChain(table Table, name chainRef) {
	w.t.chain(name)
	n := w.t.end()
	w.t.chains = append(w.t.chains, chainDraft{table: table, name: n, first: n + 1})
}

func (w *portWriter) endChain() {
	w.t.chains[len(w.t.chains)-1].last = len(w.t.ends)
}

// chainRef is a per-port chain name: a prefix and a hash, written without
// building a string.
type chainRef struct {
	prefix string
	hash   *[hashLen]byte
}

// name writes a chain name.
func (t *portText) name(c chainRef) *portText {
	t.buf = append(t.buf, c.prefix...)
	t.buf = append(t.buf, c.hash[:]...)
	return t
}

// chain writes a chain name and a separating space.
func (t *portText) chain(c chainRef) *portText { return t.name(c).s(" ") }
