package rules

import (
	"strconv"

	"kproxy.dev/kproxy/sync/servicemap"
)

// endpointChains writes one KUBE-SEP chain per reachable endpoint: mark
// hairpin traffic (an endpoint reaching itself through the service) for
// masquerade, then DNAT, recording the client for affinity.
func (w *portWriter) endpointChains() {
	p, t := w.p, w.t
	for _, ep := range p.reachable {
		var h [hashLen]byte
		endpointHash(&h, p.name, p.proto, ep.AddrPort())
		t.sepHashes = append(t.sepHashes, h)
	}
	for i, ep := range p.reachable {
		sep := chainRef{EndpointPrefix, &t.sepHashes[i]}
		w.beginChain(NAT, sep)
		t.word("-s").host(ep.Addr, w.b.hostBits)
		w.endpointChainComment()
		t.s("-j ").s(MarkMasq)
		t.end()
		t.word("-p").word(p.proto)
		w.endpointChainComment()
		if p.affinitySeconds > 0 {
			t.s("-m recent --set --name ").chain(sep).s("--mask ").word(w.b.recentMask).s("--rsource ")
		}
		t.word("-m").word(p.proto).s("-j DNAT --to-destination ").endpoint(ep.AddrPort())
		t.end()
		w.endChain()
	}
}

// serviceChains writes KUBE-SVC (Cluster policy) and KUBE-SVL (Local
// policy) when the port uses them.
func (w *portWriter) serviceChains() {
	p := w.p
	if p.usesClusterChain {
		w.beginChain(NAT, chainRef{ServicePrefix, &p.hash})
		if p.hasInternal && !p.internalLocal {
			w.masqueradeRule()
		}
		w.balance(p.clusterEPs)
		w.endChain()
	}
	if p.usesLocalChain {
		w.beginChain(NAT, chainRef{LocalServicePrefix, &p.hash})
		if p.hasInternal && p.internalLocal {
			w.masqueradeRule()
		}
		w.balance(p.localEPs)
		w.endChain()
	}
}

// masqueradeRule marks cluster IP traffic for masquerade: all of it with
// --masquerade-all, else traffic from outside the cluster CIDR (a host
// routing the service range via this node), else none.
func (w *portWriter) masqueradeRule() {
	p, t := w.p, w.t
	switch {
	case w.b.cfg.MasqueradeAll:
	case w.b.fromOutside != "":
		if !w.b.byInterface {
			t.s(w.b.fromOutside)
		}
	default:
		return
	}
	t.word("-d").host(p.clusterIP, w.b.hostBits)
	if w.b.byInterface && !w.b.cfg.MasqueradeAll {
		t.s(w.b.fromOutside)
	}
	t.word("-p").word(p.proto).comment(p.name, " cluster IP").
		word("-m").word(p.proto).word("--dport").uint(uint64(p.port)).s("-j ").s(MarkMasq)
	t.end()
}

// balance writes the rules spreading a policy chain's traffic over eps:
// first the affinity rules sending known clients back to their endpoint,
// then one rule per endpoint taking 1/n of what is left.
func (w *portWriter) balance(eps []servicemap.Endpoint) {
	p, t := w.p, w.t
	if p.affinitySeconds > 0 {
		seconds := strconv.FormatUint(p.affinitySeconds, 10)
		seps := w.sepsOf()
		for _, ep := range eps {
			sep := seps(ep)
			w.endpointJumpComment(ep)
			t.s("-m recent --rcheck --seconds ").word(seconds).
				s("--reap --name ").chain(sep).s("--mask ").word(w.b.recentMask).s("--rsource -j ").chain(sep)
			t.end()
		}
	}
	seps := w.sepsOf()
	for i, ep := range eps {
		w.endpointJumpComment(ep)
		if left := len(eps) - i; left > 1 {
			t.s("-m statistic --mode random --probability ").word(w.b.probabilities.of(left))
		}
		t.s("-j ").chain(seps(ep))
		t.end()
	}
}

// endpointChainComment writes the comment of a KUBE-SEP rule, and
// endpointJumpComment that of a rule jumping to a KUBE-SEP chain.
// Large-cluster mode leaves both out, as kube-proxy does.
func (w *portWriter) endpointChainComment() {
	if !w.b.cfg.LargeCluster {
		w.t.comment(w.p.name)
	}
}

func (w *portWriter) endpointJumpComment(ep servicemap.Endpoint) {
	if !w.b.cfg.LargeCluster {
		w.t.endpointComment(w.p.name, ep.AddrPort())
	}
}

// sepsOf returns a lookup of the KUBE-SEP chains of endpoints asked for in
// reachable's order (a policy's endpoints are): one walk over reachable
// for the whole list.
func (w *portWriter) sepsOf() func(servicemap.Endpoint) chainRef {
	next := 0
	return func(ep servicemap.Endpoint) chainRef {
		key := ep.AddrPort()
		for i := next; i < len(w.p.reachable); i++ {
			if w.p.reachable[i].AddrPort() == key {
				next = i + 1
				return chainRef{EndpointPrefix, &w.t.sepHashes[i]}
			}
		}
		// Not reached: every policy endpoint is in reachable, in order.
		// Hash it anyway rather than write a wrong name.
		var h [hashLen]byte
		endpointHash(&h, w.p.name, w.p.proto, key)
		return chainRef{EndpointPrefix, &h}
	}
}

// externalChain writes KUBE-EXT: where NodePort, externalIP and
// LoadBalancer traffic goes before its policy chain.
func (w *portWriter) externalChain() {
	p, t := w.p, w.t
	if !p.usesExternalChain {
		return
	}
	svc := chainRef{ServicePrefix, &p.hash}
	w.beginChain(NAT, chainRef{ExternalPrefix, &p.hash})
	if !p.externalLocal {
		// Endpoints may be on other nodes: masquerade so replies come back.
		t.comment("masquerade traffic for ", p.name, " external destinations").s("-j ").s(MarkMasq)
		t.end()
	} else {
		// Local policy keeps the client's address, except for traffic
		// that starts on this node: pods go to the service as if through
		// an outside load balancer, and the node itself must be
		// masqueraded, as its source would be the external IP.
		if w.b.fromPods != "" {
			t.s(w.b.fromPods).comment("pod traffic for ", p.name, " external destinations").s("-j ").chain(svc)
			t.end()
		}
		t.comment("masquerade LOCAL traffic for ", p.name, " external destinations").
			s("-m addrtype --src-type LOCAL -j ").s(MarkMasq)
		t.end()
		t.comment("route LOCAL traffic for ", p.name, " external destinations").
			s("-m addrtype --src-type LOCAL -j ").chain(svc)
		t.end()
	}
	if p.hasExternal {
		t.s("-j ").chain(w.externalPolicyChain())
		t.end()
	}
	w.endChain()
}

// firewallChain writes KUBE-FW: LoadBalancer traffic from the allowed
// source ranges goes on to KUBE-EXT; the rest falls through to the filter
// table's KUBE-PROXY-FIREWALL, which drops it.
func (w *portWriter) firewallChain() {
	p, t := w.p, w.t
	if !p.usesFirewallChain {
		return
	}
	ext := chainRef{ExternalPrefix, &p.hash}
	w.beginChain(NAT, chainRef{FirewallPrefix, &p.hash})
	for _, r := range p.sourceRanges {
		t.word("-s").prefix(r).comment(p.name, " loadbalancer IP").s("-j ").chain(ext)
		t.end()
	}
	if p.allowFromNode {
		for _, ip := range p.lbIPs {
			t.word("-s").host(ip, w.b.hostBits).comment(p.name, " loadbalancer IP").s("-j ").chain(ext)
			t.end()
		}
	}
	t.comment("other traffic to ", p.name, " will be dropped by KUBE-PROXY-FIREWALL")
	t.end()
	w.endChain()
}
