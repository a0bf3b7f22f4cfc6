package nftables

import (
	"context"
	"strings"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/redirect/modes/nftables/rules"
)

// The write paths: a transaction through nft (runTx), a batch over
// netlink (runBatch) falling back to nft when the socket fails, a partial
// sync's operations (runOps, runSplit) and a full sync's deferred policy
// chains (writeDeferred). Each ends in account, which keeps the failure
// metrics and the commits the generation check counts on.

// countFailure counts a write the kernel refused at line in kube-proxy's
// metrics: a failed deletion of a stale chain is a cleanup failure,
// anything else a sync one.
func (f *family) countFailure(line string) {
	if strings.HasPrefix(line, "delete chain ") {
		f.metrics.cleanupFailures.WithLabelValues(string(f.fam)).Inc()
	} else {
		f.metrics.syncFailures.WithLabelValues(string(f.fam)).Inc()
	}
}

// runTx runs tx through nft.
func (f *family) runTx(ctx context.Context, tx *knftables.Transaction) error {
	err := f.nft.Run(ctx, tx)
	line := ""
	if err != nil {
		line, err = txError(err, tx)
	}
	return f.account(line, err)
}

// runBatch sends one netlink batch. retry says that the socket failed
// before the kernel saw the batch (nothing was applied, and nft may still
// get through): mayRetry allows it, else the failure is counted.
func (f *family) runBatch(b *batch, mayRetry bool) (retry bool, err error) {
	line, err := f.fast.run(b)
	if err != nil && line == "" && mayRetry {
		f.logger.Error(err, "Writing over netlink failed; using nft")
		return true, nil
	}
	return false, f.account(line, err)
}

// account is every write path's ending, nft's and netlink's: a write the
// kernel took moves nf_tables' generation (commits), one it refused at
// line is counted (countFailure).
func (f *family) account(line string, err error) error {
	if err != nil {
		f.countFailure(line)
		return err
	}
	f.commits++
	return nil
}

// runOps runs a partial sync's operations: over netlink when possible,
// else through nft in one transaction. groups, when given, are the same
// operations in groups that may go in separate transactions; a sync too
// big for one netlink batch goes in several (splitBatches), each atomic.
func (f *family) runOps(ctx context.Context, b *rules.Builder, ops []op, groups [][]op, shared bool) error {
	if f.fast != nil && !shared && groups != nil && len(ops) > splitAbove {
		done, err := f.runSplit(groups)
		if done || err != nil {
			return err
		}
	}
	if f.fast != nil && !shared {
		if batch, ok := f.fast.encode(ops); ok {
			if retry, err := f.runBatch(batch, true); err != nil || !retry {
				return err
			}
		}
	}
	tx := f.nft.NewTransaction()
	if shared {
		b.WriteShared(tx, false, false)
	}
	addrType := b.AddrType()
	for _, o := range ops {
		o.write(tx, addrType)
	}
	return f.runTx(ctx, tx)
}

// runSplit writes a partial sync too big for one netlink batch as several,
// each holding whole groups and at most deferredPerBatch DNAT rules: nft
// would write it as one transaction whose cost grows with the square of
// its anonymous maps (for each, the kernel walks the table's sets and the
// transaction's list). Batches commit one after the other; a refused one
// leaves the earlier ones applied, and the next sync is a full one. done
// is false, with nothing written, when some operation has no netlink form.
func (f *family) runSplit(groups [][]op) (done bool, err error) {
	var batches []*batch
	var cur []op
	rules, size := 0, 0
	flush := func() bool {
		if len(cur) == 0 {
			return true
		}
		b, ok := f.fast.encode(cur)
		if !ok {
			return false
		}
		batches = append(batches, b)
		cur, rules, size = nil, 0, 0
		return true
	}
	for _, g := range groups {
		gRules, gSize := 0, 0
		for _, o := range g {
			if o.kind == opAddRule {
				gRules++
			}
			gSize += o.sizeEstimate()
		}
		// A new batch before the group that would overfill this one.
		if (rules+gRules > deferredPerBatch || size+gSize > maxBatch/2) && !flush() {
			return false, nil
		}
		cur = append(cur, g...)
		rules, size = rules+gRules, size+gSize
	}
	if !flush() {
		return false, nil
	}
	for i, b := range batches {
		// Only before anything was applied may nft write it all instead.
		retry, err := f.runBatch(b, i == 0)
		if retry {
			return false, nil
		}
		if err != nil {
			return true, err
		}
	}
	return true, nil
}

// writeDeferred writes the deferred policy chains' rules over netlink, in
// batches of deferredPerBatch chains, each atomic: a chain has its old rule
// or its new one, never none. nft writes each rule's anonymous map under a
// name the kernel numbers by scanning every set of the table (minutes at
// 30,000 services); these go under names of their own.
func (f *family) writeDeferred(ctx context.Context, chains []deferredChain) error {
	for start := 0; start < len(chains); start += deferredPerBatch {
		var ops []op
		for _, d := range chains[start:min(start+deferredPerBatch, len(chains))] {
			if d.existed {
				ops = append(ops, op{kind: opFlushChain, chain: d.chain.Name})
			}
			ops = append(ops, op{kind: opAddRule, chain: d.chain.Name, rule: d.chain.Rules[0]})
		}
		if batch, ok := f.fast.encode(ops); ok {
			retry, err := f.runBatch(batch, true)
			if err != nil {
				return err
			}
			if !retry {
				continue
			}
		}
		tx := f.nft.NewTransaction()
		for _, o := range ops {
			o.write(tx, f.fast.addrType)
		}
		if err := f.runTx(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}
