package iptables

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// canaryTables are the tables holding a canary. Every sync checks the
// mangle one, which is cheap on both backends (mangle is small, and the
// legacy backend reads a whole table to list one chain); periodic syncs
// check them all, as kube-proxy's canary monitor does every minute.
var canaryTables = []rules.Table{rules.Mangle, rules.NAT, rules.Filter}

// family is the iptables mode for one IP family: what it last wrote, and how
// to write the next sync.
type family struct {
	fam      ipfamily.Family
	tables   Tables
	newModel func(rules.Config) (RuleModel, error)
	base     rules.Config // the configured part; topology and node IPs come from snapshots
	// node completes base from each snapshot.
	node      kernelmode.Node
	maxChains int
	metrics   *modeMetrics
	logger    klog.Logger

	// State of the last successful sync; model is nil before the first.
	model    RuleModel
	modelCfg rules.Config
	applied  kernelmode.Applied[rules.PortRules]
	resync   kernelmode.Resync
}

// programmed reads what the last sync wrote for name (nil: nothing).
func (f *family) programmed(name servicemap.ServicePortName) *rules.PortRules {
	return f.applied.Get(name)
}

// RuleModel is what the mode needs from the rule builder; *rules.Builder
// implements it.
type RuleModel interface {
	ForPort(sp *servicemap.ServicePort) (rules.PortRules, error)
	SharedChains() []rules.SharedChain
	Jumps() []rules.Jump
}

// configFor completes the configured rules.Config with what the snapshot
// says about this node.
func (f *family) configFor(snap *servicemap.Snapshot) (rules.Config, error) {
	cfg := f.base
	facts := f.node.Read(snap)
	cfg.Topology = facts.Topology
	cfg.LargeCluster = endpointCount(snap) > largeClusterEndpoints
	cfg.NodePortAddresses = facts.NodePortAddresses
	if cidrs, ok := f.node.LocalCIDRs(facts); ok {
		cfg.ClusterCIDRs = cidrs
	}
	if len(cfg.NodePortAddresses) > 0 && f.node.LocalAddrs != nil {
		addrs, err := f.node.Addrs()
		if err != nil {
			return cfg, fmt.Errorf("%w (for --nodeport-addresses)", err)
		}
		cfg.InterfaceAddrs = addrs
	}
	if len(cfg.NodeIPs) == 0 {
		cfg.NodeIPs = facts.NodeIPs
	}
	return cfg, nil
}

// largeClusterEndpoints is kube-proxy's threshold for its large-cluster
// mode (rules without comments; see rules.Config.LargeCluster).
const largeClusterEndpoints = 1000

func endpointCount(snap *servicemap.Snapshot) int {
	n := 0
	for _, sp := range snap.All() {
		n += len(sp.Endpoints)
	}
	return n
}

// sync brings this family's rules in line with snap.
func (f *family) sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	cfg, err := f.configFor(snap)
	if err != nil {
		return f.failed(err)
	}
	full := f.resync.Full(changes, f.model != nil) || !configEqual(cfg, f.modelCfg)
	f.metrics.SyncStarted()
	if !full {
		tables := canaryTables[:1]
		if changes.Periodic {
			tables = canaryTables
		}
		intact, err := f.canariesIntact(ctx, tables)
		if err != nil {
			return f.failed(fmt.Errorf("checking the canary chains: %w", err))
		}
		if !intact {
			f.logger.Info("A canary chain is gone: someone flushed iptables; rewriting every rule", "family", f.fam)
			f.resync.Damaged()
			full = true
		}
	}
	if full {
		model, err := f.newModel(cfg)
		if err != nil {
			return fmt.Errorf("%s rule model: %w", f.fam, err)
		}
		// The kernel is read for leftovers only when what is there is not
		// known: at start, after a failure, after someone flushed.
		readKernel := f.model == nil || f.resync.Unknown()
		start := time.Now()
		err = f.fullSync(ctx, snap, model, readKernel)
		f.metrics.Observe(true, start)
		if err != nil {
			f.metrics.Failures.Inc()
			return f.failed(err)
		}
		f.model, f.modelCfg = model, cfg
		f.resync.Synced()
	} else {
		start := time.Now()
		err := f.partialSync(ctx, snap, changes)
		f.metrics.Observe(false, start)
		if err != nil {
			f.metrics.Failures.Inc()
			f.metrics.partialRestoreFailures.Inc()
			return f.failed(err)
		}
	}
	f.reportRuleCounts()
	f.metrics.SyncSucceeded(string(rules.NAT), string(rules.Filter))
	return nil
}

// failed marks the state unknown: the next sync is a full one.
func (f *family) failed(err error) error {
	return f.resync.Failed(f.fam, err)
}

// portRules builds the rules of every port of snap, sorted by name. A port
// the builder rejects keeps what was last programmed for it, if anything:
// bad input for one service never takes down the others, nor its own
// previous rules.
func (f *family) portRules(snap *servicemap.Snapshot, model RuleModel, names []servicemap.ServicePortName) (map[servicemap.ServicePortName]*rules.PortRules, error) {
	return kernelmode.BuildPorts(snap, names, f.applied.Last(), func(sp *servicemap.ServicePort) (*rules.PortRules, error) {
		pr, err := model.ForPort(sp)
		if err != nil {
			return nil, fmt.Errorf("service port %s: %w", sp.Name, err)
		}
		return &pr, nil
	}, f.metrics.PortErrors)
}

// fullSync rewrites every chain kproxy owns. On nf_tables a restore's cost
// grows with the square of the chains it declares, so large rule sets go in
// several transactions of at most maxChains chains, ordered so every
// intermediate state is consistent: first the shared chains that do not
// exist yet (empty), then the service ports' own chains, then the shared
// chains rewritten to jump to them, then stale chains removed. Traffic of a
// service follows either its old rules or its new ones throughout.
func (f *family) fullSync(ctx context.Context, snap *servicemap.Snapshot, model RuleModel, readKernel bool) error {
	existing, builtin, err := f.kernelState(ctx, readKernel)
	if err != nil {
		return err
	}
	jumps, err := f.missingJumps(ctx, model.Jumps(), builtin)
	if err != nil {
		return err
	}

	names := make([]servicemap.ServicePortName, 0, snap.Len())
	for name := range snap.All() {
		names = append(names, name)
	}
	want, portErr := f.portRules(snap, model, names)
	if portErr != nil {
		f.logger.Error(portErr, "Some service ports cannot be programmed; they keep their previous rules", "family", f.fam)
	}
	shared := model.SharedChains()

	chunks := restore.NewChunks(f.maxChains, tableOrder...)
	for _, sc := range shared {
		if !existing[sc.Table][sc.Name] {
			chunks.Current().Declare(string(sc.Table), sc.Name)
		}
	}

	portShared := sharedRules{}
	chunks.Next()
	keep := map[sharedKey]bool{}
	for _, name := range slices.SortedFunc(maps.Keys(want), servicemap.ServicePortName.Compare) {
		pr := want[name]
		if pr == nil {
			continue
		}
		current := chunks.Fit(len(pr.Chains))
		for _, c := range pr.Chains {
			writeChain(current, c)
			keep[sharedKey{c.Table, c.Name}] = true
		}
		for _, r := range pr.Shared {
			portShared.add(r)
		}
	}

	current := chunks.Current()
	if chunks.Split() && current.Chains() > 0 {
		current = chunks.Next()
	}
	writeShared(current, shared, portShared)
	// Jumps from the built-in chains go in with the shared chains they
	// enter, as restore lines: checking each with iptables -C would cost a
	// read of the whole table per rule on the legacy backend.
	for _, j := range jumps {
		if j.First {
			current.Insert(string(j.Table), j.Chain, j.Rule())
		} else {
			current.Append(string(j.Table), j.Chain, j.Rule())
		}
	}
	for _, t := range []rules.Table{rules.NAT, rules.Filter} {
		for _, name := range slices.Sorted(maps.Keys(existing[t])) {
			if isPerPortChain(name) && !keep[sharedKey{t, name}] {
				chunks.Fit(1).Remove(string(t), name)
			}
		}
	}

	payloads := chunks.Payloads()
	if !chunks.Split() {
		// One transaction: the first payload's empty declarations are
		// redundant with the rewrite of every shared chain.
		merged := newPayload()
		for _, p := range payloads[1:] {
			merged.Merge(p)
		}
		payloads = []*restore.Payload{merged}
	}
	if err := restoreAll(ctx, f.tables, payloads); err != nil {
		return fmt.Errorf("full sync, %w", err)
	}
	f.applied.Replace(want)
	return nil
}

// kernelState returns, per table, the chains present, and the rules of the
// built-in chains: read from the kernel, or, when the kernel is known to
// hold what the last sync wrote, the chains taken from that (and no
// built-in rules: missingJumps then lists the few chains it needs).
func (f *family) kernelState(ctx context.Context, readKernel bool) (map[rules.Table]map[string]bool, map[sharedKey][]string, error) {
	existing := map[rules.Table]map[string]bool{rules.NAT: {}, rules.Filter: {}, rules.Mangle: {}}
	if !readKernel {
		for _, pr := range f.applied.Last() {
			for _, c := range pr.Chains {
				existing[c.Table][c.Name] = true
			}
		}
		for _, sc := range f.model.SharedChains() {
			existing[sc.Table][sc.Name] = true
		}
		return existing, nil, nil
	}
	builtin := map[sharedKey][]string{}
	for t := range existing {
		dump, err := f.tables.Save(ctx, t)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the %s table: %w", t, err)
		}
		saved, err := restore.ParseSave(dump)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the %s table: %w", t, err)
		}
		for _, st := range saved {
			for _, c := range st.Chains {
				existing[t][c.Name] = true
			}
			for _, r := range st.Rules {
				if isBuiltin(r.Chain) {
					k := sharedKey{t, r.Chain}
					builtin[k] = append(builtin[k], r.Line)
				}
			}
		}
	}
	return existing, builtin, nil
}

// missingJumps returns the jumps the built-in chains lack. builtin holds
// their rules when already read; otherwise each chain a jump lives in is
// listed on its own, which is cheap on nf_tables.
func (f *family) missingJumps(ctx context.Context, jumps []rules.Jump, builtin map[sharedKey][]string) ([]rules.Jump, error) {
	if builtin == nil {
		builtin = map[sharedKey][]string{}
		for _, j := range jumps {
			k := sharedKey{j.Table, j.Chain}
			if _, done := builtin[k]; done {
				continue
			}
			lines, err := f.tables.ListChain(ctx, j.Table, j.Chain)
			if err != nil {
				return nil, fmt.Errorf("checking the jump rules: %w", err)
			}
			builtin[k] = append(lines, "") // non-nil even when empty
		}
	}
	var missing []rules.Jump
	for _, j := range jumps {
		if !slices.Contains(builtin[sharedKey{j.Table, j.Chain}], "-A "+j.Chain+" "+j.Rule()) {
			missing = append(missing, j)
		}
	}
	return missing, nil
}

// isBuiltin says whether chain is one of the tables' built-in chains.
func isBuiltin(chain string) bool {
	switch chain {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}

// partialSync rewrites only what changed for the changed and removed ports,
// in one transaction when it is small enough (nearly always), touching the
// shared chains rule by rule.
func (f *family) partialSync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	names := kernelmode.Touched(changes)
	want, portErr := f.portRules(snap, f.model, names)
	if portErr != nil {
		f.logger.Error(portErr, "Some service ports cannot be programmed; they keep their previous rules", "family", f.fam)
	}
	hasTail := sharedHasTail(f.model.SharedChains())
	chunks := restore.NewChunks(f.maxChains, tableOrder...)
	for _, name := range names {
		old, new := f.applied.Last()[name], want[name]
		if old == new {
			continue
		}
		diff := newPayload()
		portDiff(diff, old, new, hasTail)
		chunks.Fit(diff.Chains()).Merge(diff)
	}
	if err := restoreAll(ctx, f.tables, chunks.Payloads()); err != nil {
		return fmt.Errorf("partial sync of %d service ports, %w", len(names), err)
	}
	f.applied.Update(want)
	return nil
}

// canariesIntact says whether the canary chains of tables still exist.
func (f *family) canariesIntact(ctx context.Context, tables []rules.Table) (bool, error) {
	for _, t := range tables {
		ok, err := f.tables.ChainExists(ctx, t, restore.CanaryChain)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// reportRuleCounts sets kubeproxy_sync_proxy_rules_iptables_total per table.
func (f *family) reportRuleCounts() {
	counts := map[rules.Table]int{}
	for _, pr := range f.applied.Last() {
		for _, c := range pr.Chains {
			counts[c.Table] += len(c.Rules)
		}
		for _, r := range pr.Shared {
			counts[r.Table]++
		}
	}
	for _, sc := range f.model.SharedChains() {
		counts[sc.Table] += len(sc.Tail)
	}
	for _, t := range []rules.Table{rules.NAT, rules.Filter} {
		f.metrics.Rules.WithLabelValues(string(t), string(f.fam)).Set(float64(counts[t]))
	}
}

// configEqual compares two rule configs; any difference changes rules of
// every port, so it takes a full sync.
func configEqual(a, b rules.Config) bool {
	return a.Family == b.Family && a.MasqueradeBit == b.MasqueradeBit && a.MasqueradeAll == b.MasqueradeAll &&
		slices.Equal(a.ClusterCIDRs, b.ClusterCIDRs) && slices.Equal(a.NodePortAddresses, b.NodePortAddresses) &&
		a.BridgeInterface == b.BridgeInterface && a.InterfaceNamePrefix == b.InterfaceNamePrefix &&
		slices.Equal(a.NodeIPs, b.NodeIPs) && slices.Equal(a.InterfaceAddrs, b.InterfaceAddrs) &&
		a.LocalhostNodePorts == b.LocalhostNodePorts && a.ConntrackTCPBeLiberal == b.ConntrackTCPBeLiberal &&
		a.RandomFully == b.RandomFully && a.LargeCluster == b.LargeCluster && a.Topology == b.Topology
}
