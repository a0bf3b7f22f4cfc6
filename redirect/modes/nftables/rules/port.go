package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Port is everything one service port contributes for one family.
type Port struct {
	Name servicemap.ServicePortName
	// Chains are the port's own chains, endpoint chains first, so that a
	// transaction creating them in order creates every chain before a rule
	// jumps to it.
	Chains []Chain
	// AffinitySets are the ClientIP affinity sets of its endpoints.
	AffinitySets []AffinitySet
	// Elements are its elements in the shared sets and maps.
	Elements []Element
}

// Chain is a per-port chain and its complete rule list.
type Chain struct {
	Name  string
	Rules []Rule
}

// Rule is one rule's text and its comment ("" for none).
type Rule struct {
	Text    string
	Comment string
	// DNAT, when set, is the rule in structured form: the numgen map DNAT
	// of a policy chain without affinity (Text says the same), which the
	// mode may write over netlink instead of through nft.
	DNAT *DNATMap
}

// DNATMap is "meta l4proto P dnat ip addr . port to numgen random mod N
// map { 0 : addr . port , … }".
type DNATMap struct {
	Proto   string // "tcp", "udp" or "sctp"
	Targets []netip.AddrPort
}

// Equal says whether two rules have the same text and comment.
func (r Rule) Equal(o Rule) bool { return r.Text == o.Text && r.Comment == o.Comment }

// Equal says whether two chains have the same name and rules.
func (c Chain) Equal(o Chain) bool {
	return c.Name == o.Name && slices.EqualFunc(c.Rules, o.Rules, Rule.Equal)
}

// AffinitySet is a dynamic set remembering the clients of one endpoint.
type AffinitySet struct {
	Name    string
	Timeout time.Duration
}

// Element is one element of a shared set or map.
type Element struct {
	// Container is the set or map; Map says which.
	Container string
	Map       bool
	Key       []string
	// Value is a map element's verdict ("goto service-…", "drop").
	Value   string
	Comment string
}

// ID identifies an element within the table: its container and key.
func (e Element) ID() string { return e.Container + " " + strings.Join(e.Key, " . ") }

// Object returns the element as a knftables object.
func (e Element) Object() *knftables.Element {
	o := &knftables.Element{Key: e.Key}
	if e.Map {
		o.Map = e.Container
		o.Value = []string{e.Value}
	} else {
		o.Set = e.Container
	}
	if e.Comment != "" {
		o.Comment = knftables.PtrTo(e.Comment)
	}
	return o
}

// Object returns the set as a knftables object.
func (s AffinitySet) Object(addrType string) *knftables.Set {
	return &knftables.Set{
		Name: s.Name, Type: addrType,
		// "dynamic" as kube-proxy: some kernels add it on their own, and
		// a later add without it would then fail.
		Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Timeout: knftables.PtrTo(s.Timeout),
	}
}

// AddrType is "ipv4_addr" or "ipv6_addr".
func (b *Builder) AddrType() string { return b.addrType }

// ForPort returns sp's objects for the Builder's family, as kube-proxy
// v1.36 writes them; a port without a cluster IP of the family has none.
func (b *Builder) ForPort(sp *servicemap.ServicePort) (Port, error) {
	if sp == nil {
		return Port{}, errNilPort
	}
	out := Port{Name: sp.Name}
	clusterIP, ok := kernelmode.ClusterIP(sp, b.v6)
	if !ok {
		return out, nil
	}
	proto, err := servicemap.ProtocolName(sp.Name.Protocol)
	if err != nil {
		return out, fmt.Errorf("service port %s: %w", sp.Name, err)
	}
	if sp.Port == 0 {
		return out, fmt.Errorf("service port %s: port 0 cannot be programmed", sp.Name)
	}
	if err := checkName(sp.Name); err != nil {
		return out, fmt.Errorf("service port %s: %w", sp.Name, err)
	}
	if sp.AffinityTimeout != 0 && sp.AffinityTimeout < time.Second {
		return out, fmt.Errorf("service port %s: ClientIP affinity timeout %s is under nftables' 1 s resolution", sp.Name, sp.AffinityTimeout)
	}
	w := portWriter{b: b, sp: sp, out: &out, proto: proto, port: itoa(sp.Port), nameString: kernelmode.PortName(sp.Name)}
	base := portBase(sp.Name, proto)
	w.clusterChain, w.localChain = ClusterPolicyPrefix+base, LocalPolicyPrefix+base
	w.externalChain, w.firewallChain = ExternalPrefix+base, FirewallPrefix+base
	w.write(clusterIP)
	return out, nil
}

type portWriter struct {
	b          *Builder
	sp         *servicemap.ServicePort
	out        *Port
	proto      string
	port       string
	nameString string

	clusterChain, localChain, externalChain, firewallChain string
}

// endpoint is an endpoint with its object names.
type endpoint struct {
	servicemap.Endpoint
	chain, set string
}

func (w *portWriter) write(clusterIP netip.Addr) {
	b, sp := w.b, w.sp
	externalIPs := kernelmode.AddrsOf(sp.ExternalIPs, b.v6)
	lbIPs := kernelmode.AddrsOf(sp.LoadBalancerIPs, b.v6)
	sourceRanges := b.sourceRanges(sp.LoadBalancerSourceRanges)

	// kube-proxy's CategorizeEndpoints, per family.
	// Hidden external IPs (AllowServiceExternalIPs off) count, as in
	// kube-proxy's ExternallyAccessible, though nothing leads to them.
	accessible := sp.NodePort != 0 || len(externalIPs) > 0 || len(lbIPs) > 0 ||
		len(kernelmode.AddrsOf(sp.HiddenExternalIPs, b.v6)) > 0
	usesCluster := !sp.InternalPolicyLocal || accessible
	usesLocal := sp.InternalPolicyLocal || (sp.ExternalPolicyLocal && accessible)
	var clusterEPs, localEPs []servicemap.Endpoint
	if usesCluster {
		clusterEPs = kernelmode.SortedAsText(sp.EligibleEndpoints(b.v6, false, b.cfg.Topology))
	}
	if usesLocal {
		localEPs = kernelmode.SortedAsText(sp.EligibleEndpoints(b.v6, true, b.cfg.Topology))
	}
	reachable := unionAsText(clusterEPs, localEPs)
	hasEndpoints := false
	for _, ep := range sp.Endpoints {
		if servicemap.IsIPv6(ep.Addr) == b.v6 && (ep.Ready || ep.ServingTerminating()) {
			hasEndpoints = true
			break
		}
	}
	affinity := sp.AffinityTimeout != 0
	names := map[netip.AddrPort]endpoint{}
	named := func(ep servicemap.Endpoint) endpoint {
		e, ok := names[ep.AddrPort()]
		if !ok {
			eb := endpointBase(sp.Name, w.proto, ep.AddrPort())
			e = endpoint{Endpoint: ep, chain: EndpointPrefix + eb, set: AffinityPrefix + eb}
			names[ep.AddrPort()] = e
		}
		return e
	}

	for _, ep := range reachable {
		if ep.IsLocal {
			ip := ep.Addr.Unmap().String()
			w.elem(Element{Container: HairpinConnectionsSet, Key: []string{ip, ip, w.proto, itoa(ep.Port)}})
		}
	}

	usesClusterChain := len(clusterEPs) > 0
	usesLocalChain := len(localEPs) > 0
	internalChain, hasInternal := w.clusterChain, hasEndpoints
	if sp.InternalPolicyLocal {
		internalChain = w.localChain
		hasInternal = hasInternal && len(localEPs) > 0
	}
	externalPolicyChain, hasExternal := w.clusterChain, hasEndpoints
	if sp.ExternalPolicyLocal {
		externalPolicyChain = w.localChain
		hasExternal = hasExternal && len(localEPs) > 0
	}
	usesExternalChain := hasEndpoints && accessible

	var internalVerdict, externalVerdict string
	if !hasEndpoints {
		internalVerdict, externalVerdict = "goto "+RejectChain, "goto "+RejectChain
	} else {
		if !hasInternal {
			internalVerdict = "drop"
		}
		if !hasExternal {
			externalVerdict = "drop"
		}
	}

	cip := clusterIP.String()
	w.elem(Element{Container: ClusterIPsSet, Key: []string{cip}})
	if hasInternal {
		w.elem(Element{Container: ServiceIPsMap, Map: true, Key: []string{cip, w.proto, w.port}, Value: "goto " + internalChain})
	} else {
		w.elem(Element{Container: NoEndpointServicesMap, Map: true, Key: []string{cip, w.proto, w.port}, Value: internalVerdict, Comment: w.nameString})
	}
	for _, ip := range externalIPs {
		key := []string{ip.Unmap().String(), w.proto, w.port}
		if hasEndpoints {
			w.elem(Element{Container: ServiceIPsMap, Map: true, Key: key, Value: "goto " + w.externalChain})
		}
		if !hasExternal {
			w.elem(Element{Container: NoEndpointServicesMap, Map: true, Key: key, Value: externalVerdict, Comment: w.nameString})
		}
	}
	usesFirewall := len(lbIPs) > 0 && len(sourceRanges) > 0
	for _, ip := range lbIPs {
		key := []string{ip.Unmap().String(), w.proto, w.port}
		if hasEndpoints {
			w.elem(Element{Container: ServiceIPsMap, Map: true, Key: key, Value: "goto " + w.externalChain})
		}
		if usesFirewall {
			w.elem(Element{Container: FirewallIPsMap, Map: true, Key: key, Value: "goto " + w.firewallChain})
		}
	}
	if !hasExternal {
		for _, ip := range lbIPs {
			w.elem(Element{Container: NoEndpointServicesMap, Map: true, Key: []string{ip.Unmap().String(), w.proto, w.port},
				Value: externalVerdict, Comment: w.nameString})
		}
	}
	if sp.NodePort != 0 {
		key := []string{w.proto, itoa(sp.NodePort)}
		if hasEndpoints {
			w.elem(Element{Container: ServiceNodePortsMap, Map: true, Key: key, Value: "goto " + w.externalChain})
		}
		if !hasExternal {
			w.elem(Element{Container: NoEndpointNodePortsMap, Map: true, Key: key, Value: externalVerdict, Comment: w.nameString})
		}
	}

	// Chains: endpoint chains first (affinity only), then the policy
	// chains, the external chain and the firewall chain.
	if affinity {
		for _, ep := range reachable {
			e := named(ep)
			w.out.AffinitySets = append(w.out.AffinitySets, AffinitySet{Name: e.set, Timeout: sp.AffinityTimeout.Truncate(time.Second)})
			w.out.Chains = append(w.out.Chains, Chain{Name: e.chain, Rules: []Rule{
				{Text: "update @" + e.set + " { " + b.ipX + " saddr }"},
				{Text: "meta l4proto " + w.proto + " dnat to " + endpointString(ep.AddrPort())},
			}})
		}
	}
	if usesClusterChain {
		w.out.Chains = append(w.out.Chains, Chain{Name: w.clusterChain, Rules: w.endpointRules(clusterEPs, affinity, named)})
	}
	if usesLocalChain {
		w.out.Chains = append(w.out.Chains, Chain{Name: w.localChain, Rules: w.endpointRules(localEPs, affinity, named)})
	}
	if usesExternalChain {
		var rules []Rule
		if !sp.ExternalPolicyLocal {
			rules = append(rules, Rule{Text: b.masqRule, Comment: "masquerade"})
		} else {
			if b.ifLocal != "" {
				rules = append(rules, Rule{Text: b.ifLocal + " goto " + w.clusterChain, Comment: "short-circuit pod traffic"})
			}
			rules = append(rules,
				Rule{Text: "fib saddr type local " + b.masqRule, Comment: "masquerade local traffic"},
				Rule{Text: "fib saddr type local goto " + w.clusterChain, Comment: "short-circuit local traffic"})
		}
		if hasExternal {
			rules = append(rules, Rule{Text: "goto " + externalPolicyChain})
		}
		w.out.Chains = append(w.out.Chains, Chain{Name: w.externalChain, Rules: rules})
	}
	if usesFirewall {
		var sources []string
		allowFromNode := false
		for _, r := range sourceRanges {
			sources = append(sources, r.String())
			if b.cfg.NodeIP.IsValid() && r.Contains(b.cfg.NodeIP.Unmap()) {
				allowFromNode = true
			}
		}
		if allowFromNode {
			for _, ip := range lbIPs {
				sources = append(sources, ip.Unmap().String())
			}
		}
		w.out.Chains = append(w.out.Chains, Chain{Name: w.firewallChain, Rules: []Rule{
			{Text: b.ipX + " saddr != { " + strings.Join(sources, " , ") + " } drop"},
		}})
	}
}

// endpointRules is a policy chain's rule: a numgen map DNAT, or with
// affinity one rule per endpoint for known clients and a numgen vmap.
func (w *portWriter) endpointRules(eps []servicemap.Endpoint, affinity bool, named func(servicemap.Endpoint) endpoint) []Rule {
	var sb strings.Builder
	if !affinity {
		dnat := &DNATMap{Proto: w.proto, Targets: make([]netip.AddrPort, len(eps))}
		sb.WriteString("meta l4proto " + w.proto + " dnat " + w.b.ipX + " addr . port to numgen random mod " + strconv.Itoa(len(eps)) + " map { ")
		for i, ep := range eps {
			if i > 0 {
				sb.WriteString(" , ")
			}
			sb.WriteString(strconv.Itoa(i) + " : " + ep.Addr.Unmap().String() + " . " + itoa(ep.Port))
			dnat.Targets[i] = netip.AddrPortFrom(ep.Addr.Unmap(), ep.Port)
		}
		sb.WriteString(" }")
		return []Rule{{Text: sb.String(), DNAT: dnat}}
	}
	rules := make([]Rule, 0, len(eps)+1)
	sb.WriteString("numgen random mod " + strconv.Itoa(len(eps)) + " vmap { ")
	for i, ep := range eps {
		e := named(ep)
		rules = append(rules, Rule{Text: w.b.ipX + " saddr @" + e.set + " goto " + e.chain})
		if i > 0 {
			sb.WriteString(" , ")
		}
		sb.WriteString(strconv.Itoa(i) + " : goto " + e.chain)
	}
	sb.WriteString(" }")
	return append(rules, Rule{Text: sb.String()})
}

func (w *portWriter) elem(e Element) { w.out.Elements = append(w.out.Elements, e) }

// sourceRanges returns the ranges of the Builder's family.
func (b *Builder) sourceRanges(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range ps {
		if r.IsValid() && servicemap.IsIPv6(r.Addr()) == b.v6 {
			out = append(out, r.Masked())
		}
	}
	return out
}

// checkName refuses names nft would not take in a chain name or a quoted
// comment. The API server never lets such names through; a services file
// might.
func checkName(n servicemap.ServicePortName) error {
	if err := kernelmode.CheckNameChars(n, "an nftables name"); err != nil {
		return err
	}
	if n.Namespace == "" || n.Name == "" {
		return fmt.Errorf("%q has an empty namespace or name", kernelmode.PortName(n))
	}
	return nil
}

// unionAsText merges two text-sorted lists, each endpoint once.
func unionAsText(a, b []servicemap.Endpoint) []servicemap.Endpoint {
	switch {
	case len(b) == 0:
		return a
	case len(a) == 0:
		return b
	}
	out := slices.Clone(a)
	for _, ep := range b {
		if !slices.ContainsFunc(out, func(o servicemap.Endpoint) bool { return o.AddrPort() == ep.AddrPort() }) {
			out = append(out, ep)
		}
	}
	slices.SortFunc(out, kernelmode.CompareAsText)
	return out
}
