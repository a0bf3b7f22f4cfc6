package rules

import (
	"slices"
	"strconv"
	"sync"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"

	"kproxy.dev/kproxy/sync/servicemap"
)

// Builder builds rules for one validated Config. It computes every
// per-Config text once, so building a port's rules costs a handful of
// allocations. A Builder is immutable: safe for concurrent use.
type Builder struct {
	cfg Config
	v6  bool

	hostBits   string // "/32" or "/128": iptables-save's suffix on a single address
	mark       string // the masquerade mark, "0x4000"
	rejectWith string // REJECT's default reply for this family
	recentMask string // the recent match's default --mask: all bits of an address

	// fromPods and fromOutside are the local-traffic detector's matches
	// with a trailing space ("-s 10.0.0.0/8 ", "! -s 10.0.0.0/8 ",
	// "-i cbr0 ", "! -i veth+ "); empty without a detector. byInterface:
	// they are -i matches, which iptables-save prints after -d.
	fromPods, fromOutside string
	byInterface           bool

	// localhostNodePorts: NodePorts also answer on 127.0.0.0/8.
	localhostNodePorts bool
	// nodePortsMatchAll: --nodeport-addresses admits every local address.
	nodePortsMatchAll bool

	probabilities probabilities
	shared        []SharedChain
	jumps         []Jump

	// texts pools the scratch buffers ForPort writes rule text into.
	texts sync.Pool
}

// New validates cfg and returns a Builder for it.
func New(cfg Config) (*Builder, error) {
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	cfg.ClusterCIDRs = slices.Clone(cfg.ClusterCIDRs)
	cfg.NodePortAddresses = slices.Clone(cfg.NodePortAddresses)
	cfg.NodeIPs = slices.Clone(cfg.NodeIPs)
	cfg.InterfaceAddrs = slices.Clone(cfg.InterfaceAddrs)

	b := &Builder{
		cfg:           cfg,
		v6:            cfg.Family == ipfamily.IPv6,
		mark:          "0x" + strconv.FormatUint(1<<uint(cfg.MasqueradeBit), 16),
		probabilities: newProbabilities(),
	}
	if b.v6 {
		b.hostBits = "/128"
		b.rejectWith = "icmp6-port-unreachable"
		b.recentMask = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	} else {
		b.hostBits = "/32"
		b.rejectWith = "icmp-port-unreachable"
		b.recentMask = "255.255.255.255"
	}
	switch {
	case cfg.BridgeInterface != "":
		b.fromPods, b.fromOutside, b.byInterface = "-i "+cfg.BridgeInterface+" ", "! -i "+cfg.BridgeInterface+" ", true
	case cfg.InterfaceNamePrefix != "":
		b.fromPods, b.fromOutside, b.byInterface = "-i "+cfg.InterfaceNamePrefix+"+ ", "! -i "+cfg.InterfaceNamePrefix+"+ ", true
	case len(cfg.ClusterCIDRs) > 0:
		// kube-proxy's ClusterCIDR (and NodeCIDR) detector uses the
		// family's first range.
		pods := cfg.ClusterCIDRs[0].Masked().String()
		b.fromPods, b.fromOutside = "-s "+pods+" ", "! -s "+pods+" "
	}
	b.nodePortsMatchAll = nodeaddr.MatchAll(cfg.NodePortAddresses)
	b.localhostNodePorts = cfg.LocalhostNodePorts && !b.v6 && nodeaddr.AdmitsIPv4Loopback(cfg.NodePortAddresses)
	b.shared = b.buildSharedChains()
	b.jumps = b.buildJumps()
	return b, nil
}

func (b *Builder) getText() *portText {
	t, ok := b.texts.Get().(*portText)
	if !ok {
		t = new(portText)
	}
	t.reset()
	return t
}

func (b *Builder) putText(t *portText) {
	if t.poolable() {
		b.texts.Put(t)
	}
}

// SharedChains returns the shared chains with their fixed rules; every call
// returns a fresh copy.
func (b *Builder) SharedChains() []SharedChain {
	out := slices.Clone(b.shared)
	for i := range out {
		out[i].Tail = slices.Clone(out[i].Tail)
	}
	return out
}

// Jumps returns the rules to ensure in built-in chains, in the order to
// ensure them (each inserted first); every call returns a fresh copy.
func (b *Builder) Jumps() []Jump {
	out := slices.Clone(b.jumps)
	for i := range out {
		out[i].Args = slices.Clone(out[i].Args)
	}
	return out
}

// ForPort builds one service port's rules for cfg; see Builder.ForPort.
// Callers building many ports should make one Builder with New.
func ForPort(cfg Config, sp *servicemap.ServicePort) (PortRules, error) {
	b, err := New(cfg)
	if err != nil {
		return PortRules{}, err
	}
	return b.ForPort(sp)
}

// SharedChains returns the shared chains for cfg, or nil when cfg is
// invalid (see Validate).
func SharedChains(cfg Config) []SharedChain {
	b, err := New(cfg)
	if err != nil {
		return nil
	}
	return b.shared
}

// Jumps returns the jumps from built-in chains for cfg, or nil when cfg is
// invalid (see Validate).
func Jumps(cfg Config) []Jump {
	b, err := New(cfg)
	if err != nil {
		return nil
	}
	return b.jumps
}
