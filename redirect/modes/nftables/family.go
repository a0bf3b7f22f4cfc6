package nftables

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

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
	fam        ipfamily.Family
	nft        knftables.Interface
	base       rules.Config
	nodeName   string
	nodePorts  nodeaddr.Policy
	localAddrs func() ([]netip.Addr, error)
	metrics    *modeMetrics
	logger     klog.Logger
	now        func() time.Time

	// State of the last successful sync; builder is nil before the first.
	builder *rules.Builder
	applied map[servicemap.ServicePortName]*rules.Port
	// elems counts, per element ID, the ports that want it, with the
	// element last written.
	elems map[string]*elemState
	// stale are flushed per-port chains waiting to be deleted, with the
	// time they were flushed.
	stale map[string]time.Time
	// needFull: the kernel's state is unknown (a failure, a flush by
	// someone else); the next sync reads it and rewrites everything.
	needFull bool
	// recreated: base chains were deleted and re-added once, as kube-proxy
	// does at start.
	recreated bool
}

type elemState struct {
	refs int
	elem rules.Element
}

// configFor completes the configured rules.Config with what the snapshot
// says about this node.
func (f *family) configFor(snap *servicemap.Snapshot) (rules.Config, error) {
	cfg := f.base
	cfg.Topology = servicemap.TopologyOf(f.nodeName, snap)
	var node *servicemap.NodeInfo
	if snap != nil {
		node = snap.Node
	}
	cfg.NodePortAddresses = f.nodePorts.For(f.fam, node)
	if ip, ok := f.nodePorts.PrimaryIP(f.fam, node); ok {
		cfg.NodeIP = ip
	}
	if !nodeaddr.MatchAll(cfg.NodePortAddresses) && f.localAddrs != nil {
		addrs, err := f.localAddrs()
		if err != nil {
			return cfg, fmt.Errorf("listing the node's addresses for --nodeport-addresses: %w", err)
		}
		cfg.NodePortIPs = nodeaddr.Select(cfg.NodePortAddresses, addrs, f.fam)
	}
	return cfg, nil
}

// sync brings this family's table in line with snap, in one transaction
// (plus, when chains wait for deletion, kube-proxy's separate cleanup one).
func (f *family) sync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	cfg, err := f.configFor(snap)
	if err != nil {
		return f.failed(err)
	}
	full := changes.Full || f.needFull || f.builder == nil || !cfg.Equal(f.builder.Config())
	if !full && changes.Periodic {
		intact, err := f.canaryIntact(ctx)
		if err != nil {
			return f.failed(fmt.Errorf("checking the %s chain: %w", rules.CanaryChain, err))
		}
		if !intact {
			f.logger.Info("The kube-proxy table was flushed or deleted by someone else; rewriting it", "table", TableName)
			f.needFull, full = true, true
		}
	}
	if err := f.deleteStale(ctx); err != nil {
		f.metrics.cleanupFailures.WithLabelValues(string(f.fam)).Inc()
		f.logger.Error(err, "Unable to delete stale nftables chains; rewriting the table")
		f.needFull, full = true, true
	}
	start := time.Now()
	if full {
		b, err := rules.New(cfg)
		if err != nil {
			return f.failed(fmt.Errorf("nftables rules: %w", err))
		}
		err = f.fullSync(ctx, snap, b, f.builder == nil || f.needFull)
		f.metrics.fullDuration.WithLabelValues(string(f.fam)).Observe(time.Since(start).Seconds())
		if err != nil {
			f.metrics.syncFailures.WithLabelValues(string(f.fam)).Inc()
			return f.failed(err)
		}
		f.builder, f.needFull = b, false
		return nil
	}
	err = f.partialSync(ctx, snap, changes)
	f.metrics.partialDuration.WithLabelValues(string(f.fam)).Observe(time.Since(start).Seconds())
	if err != nil {
		f.metrics.syncFailures.WithLabelValues(string(f.fam)).Inc()
		return f.failed(err)
	}
	return nil
}

// failed marks the state unknown: the next sync is a full one.
func (f *family) failed(err error) error {
	f.needFull = true
	return fmt.Errorf("%s: %w", f.fam, err)
}

// canaryIntact lists one small chain whose content is known: a deleted
// table, or a flushed one (chains left, rules gone), shows there.
func (f *family) canaryIntact(ctx context.Context) (bool, error) {
	rs, err := f.nft.ListRules(ctx, rules.CanaryChain)
	if err != nil {
		if knftables.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	if len(rs) != 1 {
		return false, nil
	}
	// The real nft lists no rule text (only handles and comments).
	return rs[0].Rule == "" || rs[0].Rule == rules.CanaryRule, nil
}

// deleteStale deletes the chains flushed at least staleChainDelay ago.
func (f *family) deleteStale(ctx context.Context) error {
	if len(f.stale) == 0 {
		return nil
	}
	cutoff := f.now().Add(-staleChainDelay)
	tx := f.nft.NewTransaction()
	var names []string
	for _, name := range slices.Sorted(maps.Keys(f.stale)) {
		if !f.stale[name].After(cutoff) {
			tx.Delete(&knftables.Chain{Name: name})
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	for _, name := range names {
		delete(f.stale, name)
	}
	f.logger.V(2).Info("Deleting stale nftables chains", "numChains", len(names))
	if err := f.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("deleting %d stale chains, %w", len(names), txError(err, tx))
	}
	return nil
}

// ports builds the objects of the named ports. A port the builder rejects
// keeps what was last applied for it: bad input for one service never takes
// down the others, nor its own previous rules.
func (f *family) ports(b *rules.Builder, snap *servicemap.Snapshot, names []servicemap.ServicePortName) map[servicemap.ServicePortName]*rules.Port {
	out := make(map[servicemap.ServicePortName]*rules.Port, len(names))
	var errs []error
	for _, name := range names {
		sp, ok := snap.Get(name)
		if !ok {
			out[name] = nil
			continue
		}
		p, err := b.ForPort(sp)
		if err != nil {
			errs = append(errs, err)
			f.metrics.portErrors.WithLabelValues(string(f.fam)).Inc()
			out[name] = f.applied[name]
			continue
		}
		if len(p.Chains) == 0 && len(p.Elements) == 0 {
			out[name] = nil // nothing in this family
			continue
		}
		out[name] = &p
	}
	if len(errs) > 0 {
		f.logger.Error(errors.Join(errs...), "Some service ports cannot be programmed; they keep their previous rules")
	}
	return out
}

// fullSync rewrites the whole table in one transaction. readKernel: the
// kernel's chains and sets are not known (first sync, after a failure or a
// flush by someone else) and are listed, so leftovers get removed.
func (f *family) fullSync(ctx context.Context, snap *servicemap.Snapshot, b *rules.Builder, readKernel bool) error {
	existingChains := map[string]bool{}
	existingSets := map[string]bool{}
	if readKernel {
		all, err := f.nft.ListAll(ctx)
		if err != nil && !knftables.IsNotFound(err) {
			// kube-proxy goes on too: the transaction itself tells.
			f.logger.Error(err, "Failed to list the existing nftables objects")
		}
		for _, c := range all["chain"] {
			existingChains[c] = true
		}
		for _, s := range all["set"] {
			existingSets[s] = true
		}
	} else {
		for _, p := range f.applied {
			for _, c := range p.Chains {
				existingChains[c.Name] = true
			}
			for _, s := range p.AffinitySets {
				existingSets[s.Name] = true
			}
		}
		for c := range f.stale {
			existingChains[c] = true
		}
	}

	names := make([]servicemap.ServicePortName, 0, snap.Len())
	for name := range snap.All() {
		names = append(names, name)
	}
	want := f.ports(b, snap, names)

	tx := f.nft.NewTransaction()
	b.WriteShared(tx, !f.recreated)
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
	elems := map[string]*elemState{}
	var order []string
	for _, name := range names {
		p := want[name]
		if p == nil {
			continue
		}
		for _, c := range p.Chains {
			writeChain(tx, c, existingChains[c.Name])
			keepChains[c.Name] = true
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
	now := f.now()
	stale := map[string]time.Time{}
	for _, c := range slices.Sorted(maps.Keys(existingChains)) {
		if rules.IsPortChain(c) && !keepChains[c] {
			tx.Flush(&knftables.Chain{Name: c})
			stale[c] = now
			if t, ok := f.stale[c]; ok && !readKernel {
				stale[c] = t
			}
		}
	}
	for _, s := range slices.Sorted(maps.Keys(existingSets)) {
		if rules.IsAffinitySet(s) && !keepSets[s] {
			tx.Delete(&knftables.Set{Name: s})
		}
	}
	if err := f.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("full sync of %d service ports, %w", len(names), txError(err, tx))
	}
	f.applied = make(map[servicemap.ServicePortName]*rules.Port, len(want))
	for name, p := range want {
		if p != nil {
			f.applied[name] = p
		}
	}
	f.elems, f.stale, f.recreated = elems, stale, true
	return nil
}

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

// partialSync rewrites, for the changed and removed ports only, the chains
// that differ, their affinity sets and the elements that differ from what
// was applied, in one transaction. Its cost follows the change, not the
// number of services.
func (f *family) partialSync(ctx context.Context, snap *servicemap.Snapshot, changes *servicemap.ChangeSet) error {
	names := slices.Clone(changes.Changed)
	for _, sp := range changes.Removed {
		names = append(names, sp.Name)
	}
	if len(names) == 0 {
		return nil
	}
	slices.SortFunc(names, servicemap.ServicePortName.Compare)
	names = slices.Compact(names)
	want := f.ports(f.builder, snap, names)
	addrType := f.builder.AddrType()

	// Operations go in phases so that every reference is valid when made:
	// flushes before the sets they referred to go, sets before the rules
	// using them, chains before the elements pointing to them.
	var flushes, setDeletes, setAdds, chainOps []func(*knftables.Transaction)
	prev := map[string]*rules.Element{} // element IDs touched, as applied before
	touch := func(id string) {
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
	for _, name := range names {
		old, cur := f.applied[name], want[name]
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
				flushes = append(flushes, flushChain(c.Name))
				newStale[c.Name] = true
			}
		}
		for _, c := range chainsOf(cur) {
			o, existed := oldChains[c.Name]
			if existed && o.Equal(c) && !rewriteAll {
				continue
			}
			_, wasStale := f.stale[c.Name]
			if existed || wasStale {
				flushes = append(flushes, flushChain(c.Name))
			}
			chainOps = append(chainOps, func(tx *knftables.Transaction) { writeChain(tx, c, false) })
			delete(newStale, c.Name)
		}
		for _, s := range setsOf(old) {
			if n, ok := newSets[s.Name]; !ok || n != s {
				setDeletes = append(setDeletes, func(tx *knftables.Transaction) { tx.Delete(&knftables.Set{Name: s.Name}) })
			}
		}
		for _, s := range setsOf(cur) {
			if o, ok := oldSets[s.Name]; !ok || o != s {
				setAdds = append(setAdds, func(tx *knftables.Transaction) { tx.Add(s.Object(addrType)) })
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

	tx := f.nft.NewTransaction()
	for _, phase := range [][]func(*knftables.Transaction){flushes, setDeletes, setAdds, chainOps} {
		for _, op := range phase {
			op(tx)
		}
	}
	ids := slices.Sorted(maps.Keys(prev))
	var adds []*rules.Element
	for _, id := range ids {
		before := prev[id]
		st := f.elems[id]
		live := st != nil && st.refs > 0
		switch {
		case before != nil && !live:
			tx.Delete(before.Object())
			delete(f.elems, id)
		case before == nil && live:
			adds = append(adds, &st.elem)
		case before != nil && live && !elementEqual(*before, st.elem):
			tx.Delete(before.Object())
			adds = append(adds, &st.elem)
		case !live:
			delete(f.elems, id)
		}
	}
	for _, e := range adds {
		tx.Add(e.Object())
	}
	if tx.NumOperations() == 0 {
		f.commit(want, newStale, now)
		return nil
	}
	if err := f.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("partial sync of %d service ports, %w", len(names), txError(err, tx))
	}
	f.commit(want, newStale, now)
	return nil
}

// commit records a successful partial sync.
func (f *family) commit(want map[servicemap.ServicePortName]*rules.Port, newStale map[string]bool, now time.Time) {
	for name, p := range want {
		if p == nil {
			delete(f.applied, name)
		} else {
			f.applied[name] = p
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

func flushChain(name string) func(*knftables.Transaction) {
	return func(tx *knftables.Transaction) { tx.Flush(&knftables.Chain{Name: name}) }
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
