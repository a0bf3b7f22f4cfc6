package nftables

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/redirect/modes/nftables/rules"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

// staleChainDelay is how long a flushed chain waits before it is deleted:
// before Linux 6.2 the kernel notices only a moment later that a chain lost
// the map element pointing to it (kube-proxy waits one second too).
const staleChainDelay = time.Second

// family is the nftables mode for one IP family: what it last applied, and
// how to write the next sync.
type family struct {
	fam    ipfamily.Family
	nft    knftables.Interface
	lister Lister
	// fast writes partial syncs over netlink (nil: always through nft).
	fast *netlinkWriter
	base rules.Config
	// node completes base from each snapshot.
	node    kernelmode.Node
	metrics *modeMetrics
	logger  klog.Logger
	now     func() time.Time

	// State of the last successful sync; builder is nil before the first.
	builder *rules.Builder
	applied kernelmode.Applied[rules.Port]
	// elems counts, per element ID, the ports that want it, with the
	// element last written.
	elems map[string]*elemState
	// stale are flushed per-port chains waiting to be deleted, with the
	// time they were flushed.
	stale map[string]time.Time
	// resync: after a failure, or a flush by someone else, the kernel's
	// state is unknown; the next sync reads it and rewrites everything.
	resync kernelmode.Resync
	// recreated: base chains were deleted and re-added once, as kube-proxy
	// does at start.
	recreated bool
	// backlog are the service ports a large partial sync left for the
	// next syncs (see chunkedSync), in the order they are to be written.
	backlog []servicemap.ServicePortName
	// syncBudget bounds the time one sync spends on a large change before
	// it leaves the rest to the next; 0 means defaultSyncBudget.
	syncBudget time.Duration
	// wrote, when set (tests), is called after each partial write the
	// kernel took, with the service ports it wrote.
	wrote func(names []servicemap.ServicePortName)
	// commits counts the transactions the kernel took from this family
	// (each moves nf_tables' generation by one); checks the syncs that
	// compared the table with what was written, repairs the full syncs
	// that found it damaged.
	commits, checks, repairs int
}

type elemState struct {
	refs int
	elem rules.Element
}

// programmed reads what the last sync wrote for name (nil: nothing).
func (f *family) programmed(name servicemap.ServicePortName) *rules.Port {
	return f.applied.Get(name)
}

// configFor completes the configured rules.Config with what the snapshot
// says about this node.
func (f *family) configFor(snap *servicemap.Snapshot) (rules.Config, error) {
	cfg := f.base
	facts := f.node.Read(snap)
	cfg.Topology = facts.Topology
	cfg.NodePortAddresses = facts.NodePortAddresses
	if ip, ok := f.node.NodePorts.PrimaryIP(f.fam, facts.Node); ok {
		cfg.NodeIP = ip
	}
	if snap != nil {
		cfg.ServiceCIDRs = ipfamily.Prefixes(snap.ServiceCIDRs, f.fam)
	}
	if cidrs, ok := f.node.LocalCIDRs(facts); ok {
		cfg.ClusterCIDRs = cidrs
	}
	if !nodeaddr.MatchAll(cfg.NodePortAddresses) && f.node.LocalAddrs != nil {
		addrs, err := f.node.Addrs()
		if err != nil {
			return cfg, fmt.Errorf("%w (for --nodeport-addresses)", err)
		}
		cfg.NodePortIPs = nodeaddr.Select(cfg.NodePortAddresses, addrs, f.fam)
	}
	return cfg, nil
}

// sync brings this family's table in line with snap, in one transaction
// (plus, when chains wait for deletion, kube-proxy's separate cleanup one).
// check says whether the table may have been changed by someone else since
// the last sync (the mode reads nf_tables' generation to know).
func (f *family) sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet, check bool) error {
	cfg, err := f.configFor(snap)
	if err != nil {
		return f.failed(err)
	}
	full := f.resync.Full(changes, f.builder != nil)
	if !full && check {
		f.checks++
		damage, chainsIntact, err := f.damaged(ctx)
		if err != nil {
			return f.failed(err)
		}
		switch {
		case damage == "":
		case chainsIntact:
			// Only the sets' and maps' elements: writing them again
			// costs seconds at 30,000 services, a full sync minutes.
			f.logger.Info("Sets or maps of the kube-proxy table were changed by someone else; writing their elements again",
				"table", TableName, "damage", damage)
			f.repairs++
			if err := f.rewriteElements(ctx); err != nil {
				return f.failed(fmt.Errorf("writing the elements again: %w", err))
			}
		default:
			f.logger.Info("The kube-proxy table was changed by someone else; rewriting it", "table", TableName, "damage", damage)
			f.repairs++
			f.resync.Damaged()
			full = true
		}
	}
	start := time.Now()
	if full {
		b, err := rules.New(cfg)
		if err != nil {
			return f.failed(fmt.Errorf("nftables rules: %w", err))
		}
		err = f.fullSync(ctx, snap, b, f.builder == nil || f.resync.Unknown())
		f.metrics.Observe(true, start)
		if err != nil {
			return f.failed(err)
		}
		f.builder, f.backlog = b, nil
		f.resync.Synced()
		return nil
	}
	names := kernelmode.Touched(changes)
	backlog := f.backlog
	f.backlog = nil
	b, shared := f.builder, false
	if old := f.builder.Config(); !cfg.Equal(old) {
		// The node or the configuration changed: the shared objects are
		// rewritten, and the ports' objects only where they differ (a
		// rewrite of every chain costs the kernel minutes at 30,000
		// services, for its anonymous sets).
		if b, err = rules.New(cfg); err != nil {
			return f.failed(fmt.Errorf("nftables rules: %w", err))
		}
		shared = true
		if !cfg.PortsEqual(old) {
			for name := range snap.All() {
				names = append(names, name)
			}
			for name := range f.applied.Last() {
				names = append(names, name)
			}
		}
	}
	if shared || len(names)+len(backlog) <= portsPerChunk {
		err = f.partialSync(ctx, snap, append(names, backlog...), b, shared)
	} else {
		err = f.chunkedSync(ctx, snap, names, backlog, b, start)
	}
	f.metrics.Observe(false, start)
	if err != nil {
		return f.failed(err)
	}
	f.builder = b
	return nil
}

// portsPerChunk bounds the service ports of one write of a large partial
// sync: as many as one netlink batch holds (deferredPerBatch DNAT rules),
// so that the sync's budget is checked after every batch. A batch of
// new services costs the kernel more the larger the table is (each new
// anonymous map costs walks of the table's sets; bench/MEASUREMENTS.md has
// the figures); larger ones would only make a change queued behind them
// wait longer.
const portsPerChunk = deferredPerBatch

// defaultSyncBudget is how long one sync writes chunks of a large change
// before it returns and leaves the rest (the backlog) to the next syncs,
// which first write whatever changed meanwhile.
const defaultSyncBudget = time.Second

// chunkedSync writes a large partial sync in chunks of at most
// portsPerChunk ports until the sync's time budget is spent, and leaves the
// ports not written as the backlog. The ports kproxy already programs
// (endpoint changes, removals: what traffic reaches now) go first, in
// chunks of their own, so the sync's first batch carries them and nothing
// new; then the ports the backlog holds, in its order; then the changes'
// new ports. A change queued behind a large one (20,000 new services) thus
// waits for the batch in progress, and the backlog is never sorted again.
// The kernel's cost of new services is the same in 200-port batches as in
// a full sync (the walks of the table's sets when a set is created or
// looked up dominate both), so a large addition is no reason for one.
func (f *family) chunkedSync(ctx context.Context, snap *servicemap.Snapshot, names, backlog []servicemap.ServicePortName, b *rules.Builder, start time.Time) error {
	slices.SortFunc(names, servicemap.ServicePortName.Compare)
	names = slices.Compact(names)
	changed := make(map[servicemap.ServicePortName]bool, len(names))
	for _, name := range names {
		changed[name] = true
	}
	programmed := func(name servicemap.ServicePortName) bool { return f.applied.Last()[name] != nil }
	order := make([]servicemap.ServicePortName, 0, len(names)+len(backlog))
	for _, name := range names {
		if programmed(name) {
			order = append(order, name)
		}
	}
	for _, name := range backlog {
		if programmed(name) && !changed[name] {
			order = append(order, name)
		}
	}
	urgent := len(order)
	for _, name := range backlog {
		if !programmed(name) && !changed[name] {
			order = append(order, name)
		}
	}
	for _, name := range names {
		if !programmed(name) {
			order = append(order, name)
		}
	}
	budget := f.syncBudget
	if budget == 0 {
		budget = defaultSyncBudget
	}
	for done := 0; done < len(order); {
		n := min(portsPerChunk, len(order)-done)
		if done < urgent {
			n = min(n, urgent-done)
		}
		if err := f.partialSync(ctx, snap, order[done:done+n], b, false); err != nil {
			return err
		}
		done += n
		if time.Since(start) >= budget && done < len(order) {
			f.backlog = slices.Clone(order[done:])
			f.logger.V(2).Info("Large change: writing the rest at the next syncs", "left", len(f.backlog))
			break
		}
	}
	return nil
}

// failed marks the state unknown: the next sync is a full one.
func (f *family) failed(err error) error {
	f.backlog = nil // the full sync writes everything
	return f.resync.Failed(f.fam, err)
}

// damaged compares the table with what the mode last wrote, over netlink,
// and describes the first difference found ("" when none). The canary
// chain's rule count shows a deleted table, or a flushed one (chains left,
// rules gone); the element counts of the sets and maps shared by the
// service ports show a flushed map or deleted elements, which leave the
// canary alone. The counts cost a dump of each container (O(elements)),
// which is why the mode runs this only when the generation moved.
func (f *family) damaged(ctx context.Context) (damage string, chainsIntact bool, err error) {
	n, err := f.lister.RuleCount(ctx, rules.CanaryChain)
	if err != nil {
		return "", false, fmt.Errorf("checking the %s chain: %w", rules.CanaryChain, err)
	}
	if n != 1 {
		return fmt.Sprintf("chain %s holds %d rules, not 1", rules.CanaryChain, n), false, nil
	}
	want := map[string]int{}
	for _, st := range f.elems {
		if st.refs > 0 {
			want[st.elem.Container]++
		}
	}
	for _, c := range rules.Containers {
		got, err := f.lister.ElementCount(ctx, c.Name, c.Map)
		if err != nil {
			return "", false, fmt.Errorf("counting the elements of %s: %w", c.Name, err)
		}
		if got != want[c.Name] {
			return fmt.Sprintf("%s holds %d elements, not %d", c.Name, got, want[c.Name]), got >= 0, nil
		}
	}
	if want := f.builder.NodePortIPsCount(); want >= 0 {
		got, err := f.lister.ElementCount(ctx, rules.NodePortIPsSet, false)
		if err != nil {
			return "", false, fmt.Errorf("counting the elements of %s: %w", rules.NodePortIPsSet, err)
		}
		if got != want {
			return fmt.Sprintf("%s holds %d elements, not %d", rules.NodePortIPsSet, got, want), got >= 0, nil
		}
	}
	return "", true, nil
}

// rewriteElements empties the shared sets and maps and writes every element
// the mode last wrote again, with the shared chains and nodeport-ips, in
// one transaction; a chain an element points to that is gone fails it, and
// the next sync is a full one.
func (f *family) rewriteElements(ctx context.Context) error {
	tx := f.nft.NewTransaction()
	f.builder.WriteShared(tx, false, true)
	for _, id := range slices.Sorted(maps.Keys(f.elems)) {
		if st := f.elems[id]; st.refs > 0 {
			tx.Add(st.elem.Object())
		}
	}
	return f.runTx(ctx, tx)
}

// dueStale returns the stale chains flushed at least staleChainDelay ago:
// a full sync's transaction deletes them, a partial sync a transaction of
// their own after its own (deleteStale).
func (f *family) dueStale() map[string]bool {
	if len(f.stale) == 0 {
		return nil
	}
	cutoff := f.now().Add(-staleChainDelay)
	due := map[string]bool{}
	for name, t := range f.stale {
		if !t.After(cutoff) {
			due[name] = true
		}
	}
	return due
}

// ports builds the objects of the named ports. A port the builder rejects
// keeps what was last applied for it: bad input for one service never takes
// down the others, nor its own previous rules.
func (f *family) ports(b *rules.Builder, snap *servicemap.Snapshot, names []servicemap.ServicePortName) map[servicemap.ServicePortName]*rules.Port {
	out, err := kernelmode.BuildPorts(snap, names, f.applied.Last(), func(sp *servicemap.ServicePort) (*rules.Port, error) {
		p, err := b.ForPort(sp)
		if err != nil {
			return nil, err
		}
		if len(p.Chains) == 0 && len(p.Elements) == 0 {
			return nil, nil // nothing in this family
		}
		return &p, nil
	}, f.metrics.PortErrors)
	if err != nil {
		f.logger.Error(err, "Some service ports cannot be programmed; they keep their previous rules")
	}
	return out
}

// fullSync rewrites the whole table: one nft transaction, and, with the
// netlink writer, the policy chains' DNAT rules after it in netlink batches
// (each chain keeps its old rule until its batch; the kernel takes minutes
// at 30,000 services for the single transaction kube-proxy writes, and a
// fraction of that this way, most of it walking its list of anonymous sets
// once per new one). readKernel: the kernel's chains and
// sets are not known (first sync, after a failure or a flush by someone
// else) and are listed, so leftovers get removed.
func (f *family) fullSync(ctx context.Context, snap *servicemap.Snapshot, b *rules.Builder, readKernel bool) error {
	existingChains, existingSets := f.existing(ctx, readKernel)
	names := make([]servicemap.ServicePortName, 0, snap.Len())
	for name := range snap.All() {
		names = append(names, name)
	}
	want := f.ports(b, snap, names)
	tx := f.nft.NewTransaction()
	b.WriteShared(tx, !f.recreated, true)
	addrType := b.AddrType()
	keepChains := map[string]bool{}
	keepSets := map[string]bool{}
	for _, name := range names {
		if p := want[name]; p != nil {
			for _, s := range p.AffinitySets {
				tx.Add(s.Object(addrType))
				keepSets[s.Name] = true
			}
		}
	}
	// Stale affinity sets are deleted in this transaction, so a set
	// someone else still uses fails it and the previous rules stay, as in
	// kube-proxy. Rules that use a set are in chains of its own service
	// port: those chains are written here too, not deferred to netlink
	// batches, so none of them still holds its old rules when the set goes.
	var staleSets []string
	holders := map[string]bool{}
	unknownHolder := false
	for _, s := range slices.Sorted(maps.Keys(existingSets)) {
		if !rules.IsAffinitySet(s) || keepSets[s] {
			continue
		}
		staleSets = append(staleSets, s)
		if port, ok := rules.PortOf(s); ok {
			holders[port] = true
		} else {
			unknownHolder = true
		}
	}
	mayHoldStaleSet := func(chain string) bool {
		if len(staleSets) == 0 {
			return false
		}
		port, ok := rules.PortOf(chain)
		return unknownHolder || !ok || holders[port]
	}
	elems := map[string]*elemState{}
	var order []string
	var deferred []deferredChain
	for _, name := range names {
		p := want[name]
		if p == nil {
			continue
		}
		for _, c := range p.Chains {
			keepChains[c.Name] = true
			if f.fast != nil && len(c.Rules) == 1 && c.Rules[0].DNAT != nil && c.Rules[0].Comment == "" &&
				!(existingChains[c.Name] && mayHoldStaleSet(c.Name)) {
				// Written over netlink after this transaction: the
				// chain keeps its old rule until then.
				tx.Add(&knftables.Chain{Name: c.Name})
				deferred = append(deferred, deferredChain{chain: c, existed: existingChains[c.Name]})
				continue
			}
			writeChain(tx, c, existingChains[c.Name])
		}
		for _, e := range p.Elements {
			id := e.ID()
			if st, ok := elems[id]; ok {
				st.refs++
				st.elem = e
				continue
			}
			elems[id] = &elemState{refs: 1, elem: e}
			order = append(order, id)
		}
	}
	for _, id := range order {
		tx.Add(elems[id].elem.Object())
	}
	stale, deletes := f.flushStale(tx, existingChains, keepChains, readKernel)
	for _, s := range staleSets {
		tx.Delete(&knftables.Set{Name: s})
	}
	for _, c := range deletes {
		tx.Delete(&knftables.Chain{Name: c})
	}
	if err := f.runTx(ctx, tx); err != nil {
		return fmt.Errorf("full sync of %d service ports, %w", len(names), err)
	}
	if err := f.writeDeferred(ctx, deferred); err != nil {
		return fmt.Errorf("full sync of %d service ports, %w", len(names), err)
	}
	f.applied.Replace(want)
	f.elems, f.stale, f.recreated = elems, stale, true
	return nil
}

// existing returns the chains and sets of the table: listed when the
// kernel's state is unknown (readKernel), else what the last syncs wrote.
func (f *family) existing(ctx context.Context, readKernel bool) (chains, sets map[string]bool) {
	chains, sets = map[string]bool{}, map[string]bool{}
	if readKernel {
		cs, ss, err := f.lister.Names(ctx)
		if err != nil {
			// kube-proxy goes on too: the transaction itself tells.
			f.logger.Error(err, "Failed to list the existing nftables objects")
		}
		for _, c := range cs {
			chains[c] = true
		}
		for _, s := range ss {
			sets[s] = true
		}
		return chains, sets
	}
	for _, p := range f.applied.Last() {
		for _, c := range p.Chains {
			chains[c.Name] = true
		}
		for _, s := range p.AffinitySets {
			sets[s.Name] = true
		}
	}
	for c := range f.stale {
		chains[c] = true
	}
	return chains, sets
}

// flushStale flushes, in a full sync's tx, the per-port chains of existing
// that no port keeps, and returns them as the stale chains with the time
// they were flushed (kept from before when the state is known), but for
// the ones due for deletion, returned as deletes for the caller to add
// after the sets that go.
func (f *family) flushStale(tx *knftables.Transaction, existing, keep map[string]bool, readKernel bool) (stale map[string]time.Time, deletes []string) {
	now := f.now()
	stale = map[string]time.Time{}
	due := f.dueStale()
	for _, c := range slices.Sorted(maps.Keys(existing)) {
		if !rules.IsPortChain(c) || keep[c] {
			continue
		}
		if due[c] && !readKernel {
			deletes = append(deletes, c)
			continue
		}
		tx.Flush(&knftables.Chain{Name: c})
		stale[c] = now
		if t, ok := f.stale[c]; ok && !readKernel {
			stale[c] = t
		}
	}
	return stale, deletes
}

// deferredChain is a policy chain whose one numgen DNAT rule a full sync
// writes over netlink.
type deferredChain struct {
	chain   rules.Chain
	existed bool
}

// deferredPerBatch bounds the chains of one netlink batch: the kernel walks
// its transaction list for each anonymous set of a batch, so batches stay
// small.
const deferredPerBatch = 200

// writeChain adds a chain with its complete rule list; a chain that may
// exist is flushed first.
func writeChain(tx *knftables.Transaction, c rules.Chain, exists bool) {
	tx.Add(&knftables.Chain{Name: c.Name})
	if exists {
		tx.Flush(&knftables.Chain{Name: c.Name})
	}
	for _, r := range c.Rules {
		rule := &knftables.Rule{Chain: c.Name, Rule: r.Text}
		if r.Comment != "" {
			rule.Comment = knftables.PtrTo(r.Comment)
		}
		tx.Add(rule)
	}
}

// partialSync rewrites, for the named ports only, the chains that differ,
// their affinity sets and the elements that differ from what was applied,
// in one transaction; shared also rewrites the shared objects (a node or
// configuration change). Its cost follows the change, not the number of
// services. The transaction goes over netlink when the family has a fast
// writer and every operation is one it encodes; through nft otherwise.
func (f *family) partialSync(ctx context.Context, snap *servicemap.Snapshot, names []servicemap.ServicePortName, b *rules.Builder, shared bool) error {
	slices.SortFunc(names, servicemap.ServicePortName.Compare)
	names = slices.Compact(names)
	want := f.ports(b, snap, names)

	// Operations go in phases so that every reference is valid when made:
	// flushes before the sets they referred to go, sets before the rules
	// using them, chains before the elements pointing to them.
	var flushes, setDeletes, setAdds, chainOps []op
	// The same writes in groups, for a sync split into several netlink
	// batches: one per chain (its flush with its new rules: a chain never
	// shows empty between two batches) and one per element (a changed
	// value's delete with its add), listed per port, each element after
	// the chains of the last port touching it. A port's chains and
	// elements thus go in one batch, as a full sync's do.
	portGroups := make([][][]op, len(names))
	lastPort := map[string]int{}
	port := 0
	prev := map[string]*rules.Element{} // element IDs touched, as applied before
	touch := func(id string) {
		lastPort[id] = port
		if _, ok := prev[id]; ok {
			return
		}
		if st, ok := f.elems[id]; ok {
			e := st.elem
			prev[id] = &e
		} else {
			prev[id] = nil
		}
	}
	now := f.now()
	newStale := map[string]bool{}
	wanted := map[string]bool{} // chains this sync (re)writes
	for i, name := range names {
		port = i
		old, cur := f.applied.Last()[name], want[name]
		if old == cur {
			continue
		}
		oldChains := chainsByName(old)
		newChains := chainsByName(cur)
		oldSets := setsByName(old)
		newSets := setsByName(cur)
		// A set whose timeout changed is deleted and added again: the
		// rules using it must go first, so every chain is rewritten.
		rewriteAll := false
		for _, s := range setsOf(cur) {
			if o, ok := oldSets[s.Name]; ok && o != s {
				rewriteAll = true
			}
		}
		for _, c := range chainsOf(old) {
			if _, ok := newChains[c.Name]; !ok {
				flushes = append(flushes, op{kind: opFlushChain, chain: c.Name})
				newStale[c.Name] = true
			}
		}
		for _, c := range chainsOf(cur) {
			o, existed := oldChains[c.Name]
			if existed && o.Equal(c) && !rewriteAll {
				continue
			}
			_, wasStale := f.stale[c.Name]
			var group []op
			if existed || wasStale {
				flushes = append(flushes, op{kind: opFlushChain, chain: c.Name})
				group = append(group, op{kind: opFlushChain, chain: c.Name})
			}
			start := len(chainOps)
			chainOps = append(chainOps, op{kind: opAddChain, chain: c.Name})
			for _, r := range c.Rules {
				chainOps = append(chainOps, op{kind: opAddRule, chain: c.Name, rule: r})
			}
			portGroups[i] = append(portGroups[i], append(group, chainOps[start:]...))
			delete(newStale, c.Name)
			wanted[c.Name] = true
		}
		for _, s := range setsOf(old) {
			if n, ok := newSets[s.Name]; !ok || n != s {
				setDeletes = append(setDeletes, op{kind: opDeleteSet, set: s})
			}
		}
		for _, s := range setsOf(cur) {
			if o, ok := oldSets[s.Name]; !ok || o != s {
				setAdds = append(setAdds, op{kind: opAddSet, set: s})
			}
		}
		if old != nil {
			for _, e := range old.Elements {
				id := e.ID()
				touch(id)
				if st, ok := f.elems[id]; ok {
					st.refs--
				}
			}
		}
		if cur != nil {
			for _, e := range cur.Elements {
				id := e.ID()
				touch(id)
				if st, ok := f.elems[id]; ok && st.refs > 0 {
					st.refs++
					st.elem = e
				} else {
					f.elems[id] = &elemState{refs: 1, elem: e}
				}
			}
		}
	}

	// Element changes, after the chains they point to.
	elemDeletes, elemAdds := f.elementOps(prev, lastPort, portGroups)
	ops := slices.Concat(flushes, setDeletes, setAdds, chainOps, elemDeletes, elemAdds)
	if len(ops) > 0 || shared {
		var groups [][]op
		if len(setDeletes)+len(setAdds) == 0 {
			// Flushes of chains gone stale go last: nothing points to
			// them once the element groups ran.
			groups = slices.Concat(portGroups...)
			for _, c := range slices.Sorted(maps.Keys(newStale)) {
				groups = append(groups, []op{{kind: opFlushChain, chain: c}})
			}
		}
		if err := f.runOps(ctx, b, ops, groups, shared); err != nil {
			return fmt.Errorf("partial sync of %d service ports, %w", len(names), err)
		}
	}
	f.commit(want, newStale, now, f.deleteStale(ctx, b, newStale, wanted))
	if f.wrote != nil {
		f.wrote(names)
	}
	return nil
}

// elementOps returns the operations that take the elements touched from
// prev (as applied before; nil: absent) to f.elems, the deletes apart from
// the adds, forgets the elements no port wants any more, and adds each
// change as a group to portGroups at the last port touching it (lastPort).
func (f *family) elementOps(prev map[string]*rules.Element, lastPort map[string]int, portGroups [][][]op) (deletes, adds []op) {
	for _, id := range slices.Sorted(maps.Keys(prev)) {
		before := prev[id]
		st := f.elems[id]
		live := st != nil && st.refs > 0
		var group []op
		switch {
		case before != nil && !live:
			deletes = append(deletes, op{kind: opDeleteElem, elem: *before})
			group = []op{{kind: opDeleteElem, elem: *before}}
			delete(f.elems, id)
		case before == nil && live:
			adds = append(adds, op{kind: opAddElem, elem: st.elem})
			group = []op{{kind: opAddElem, elem: st.elem}}
		case before != nil && live && !elementEqual(*before, st.elem):
			deletes = append(deletes, op{kind: opDeleteElem, elem: *before})
			adds = append(adds, op{kind: opAddElem, elem: st.elem})
			group = []op{{kind: opDeleteElem, elem: *before}, {kind: opAddElem, elem: st.elem}}
		case !live:
			delete(f.elems, id)
		}
		if group != nil {
			portGroups[lastPort[id]] = append(portGroups[lastPort[id]], group)
		}
	}
	return deletes, adds
}

// deleteStale deletes the stale chains that are due, in a transaction of
// their own after the sync's, as kube-proxy does: a chain someone else
// still jumps to then fails only its own deletion (a cleanup failure,
// retried at the next sync) and never the service changes, nor does it
// turn the next sync into a full one. It returns the chains deleted.
func (f *family) deleteStale(ctx context.Context, b *rules.Builder, newStale, wanted map[string]bool) []string {
	var deletes []string
	var ops []op
	for _, c := range slices.Sorted(maps.Keys(f.dueStale())) {
		if !newStale[c] && !wanted[c] {
			ops = append(ops, op{kind: opDeleteChain, chain: c})
			deletes = append(deletes, c)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if err := f.runOps(ctx, b, ops, nil, false); err != nil {
		f.logger.Error(err, "Failed to delete stale chains; retrying at the next sync", "family", f.fam, "chains", len(deletes))
		return nil
	}
	return deletes
}

// splitAbove is the size (in operations) past which a partial sync goes
// over netlink in several batches rather than one.
const splitAbove = 2 * deferredPerBatch

// commit records a successful partial sync.
func (f *family) commit(want map[servicemap.ServicePortName]*rules.Port, newStale map[string]bool, now time.Time, deleted []string) {
	for _, c := range deleted {
		delete(f.stale, c)
	}
	f.applied.Update(want)
	for _, p := range want {
		if p != nil {
			for _, c := range p.Chains {
				delete(f.stale, c.Name)
			}
		}
	}
	for c := range newStale {
		if _, ok := f.stale[c]; !ok {
			f.stale[c] = now
		}
	}
}

func elementEqual(a, b rules.Element) bool {
	return a.Container == b.Container && a.Map == b.Map && slices.Equal(a.Key, b.Key) && a.Value == b.Value && a.Comment == b.Comment
}

func chainsOf(p *rules.Port) []rules.Chain {
	if p == nil {
		return nil
	}
	return p.Chains
}

func setsOf(p *rules.Port) []rules.AffinitySet {
	if p == nil {
		return nil
	}
	return p.AffinitySets
}

func chainsByName(p *rules.Port) map[string]rules.Chain {
	out := map[string]rules.Chain{}
	for _, c := range chainsOf(p) {
		out[c.Name] = c
	}
	return out
}

func setsByName(p *rules.Port) map[string]rules.AffinitySet {
	out := map[string]rules.AffinitySet{}
	for _, s := range setsOf(p) {
		out[s.Name] = s
	}
	return out
}
