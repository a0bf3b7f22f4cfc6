package portal

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

const (
	portalsComment  = "handle ClusterIPs; NOTE: this must be before the NodePort rules"
	nodePortComment = "handle service NodePorts; NOTE: this must be the last rule in the chain"
)

// Jumps lists the jump rules, in the order they are ensured. The nat ones
// are kube-proxy's userspace mode's, word for word: portals first in
// PREROUTING and OUTPUT, NodePorts (which match broadly, on local
// destinations) last, so a service IP that is also local is served as a
// service IP.
func Jumps() []restore.Jump {
	nodePort := func(target string) []string {
		return []string{"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", nodePortComment, "-j", target}
	}
	firewall := []string{"-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", "kproxy loadBalancerSourceRanges", "-j", ChainFirewall}
	return []restore.Jump{
		{Table: TableNAT, Chain: "PREROUTING", First: true, Args: []string{"-m", "comment", "--comment", portalsComment, "-j", ChainPortalsContainer}},
		{Table: TableNAT, Chain: "OUTPUT", First: true, Args: []string{"-m", "comment", "--comment", portalsComment, "-j", ChainPortalsHost}},
		{Table: TableNAT, Chain: "PREROUTING", Args: nodePort(ChainNodePortContainer)},
		{Table: TableNAT, Chain: "OUTPUT", Args: nodePort(ChainNodePortHost)},
		{Table: TableFilter, Chain: "INPUT", First: true, Args: []string{"-m", "comment", "--comment", "kproxy refuses direct connections to proxy ports", "-j", ChainProxyPorts}},
		{Table: TableFilter, Chain: "INPUT", First: true, Args: firewall},
		{Table: TableFilter, Chain: "FORWARD", First: true, Args: firewall},
		{Table: TableFilter, Chain: "OUTPUT", First: true, Args: firewall},
	}
}

// Config configures an Applier for one IP family.
type Config struct {
	Family  ipfamily.Family
	Backend kernel.Backend // from kernel.Features.Backend
	// Runner runs iptables-restore and iptables-save; nil means kernel.ExecRunner.
	Runner kernel.Runner
}

// Applier writes Rulesets of one family into the kernel.
type Applier struct {
	fam     ipfamily.Family
	restore *restore.Runner

	mu sync.Mutex
	// jumpsOK: the jump rules were found or made since the last full sync.
	jumpsOK bool
	// written counts the rules of the last successful restore, for Intact.
	written ruleCounts
}

// NewApplier checks cfg. Nothing is written until Apply.
func NewApplier(cfg Config) (*Applier, error) {
	r, err := restore.NewRunner(cfg.Family, cfg.Backend, cfg.Runner)
	if err != nil {
		return nil, fmt.Errorf("portal applier: %w", err)
	}
	return &Applier{fam: cfg.Family, restore: r}, nil
}

// Apply makes kproxy's chains hold exactly rs, in one iptables-restore
// --noflush. With full set (the first sync, a resync, a retry after a
// failure) it also removes stale chains of an older userspace proxy and
// re-checks the jump rules from the built-in chains, which someone may have
// flushed; otherwise the jumps are only checked until they were once in
// place. A failed restore is a *restore.Error naming the failing rule; the
// chains then keep their previous contents and the caller retries.
func (a *Applier) Apply(ctx context.Context, rs *Ruleset, full bool) error {
	if rs == nil {
		return errors.New("portal applier: nil ruleset")
	}
	if rs.Family != a.fam {
		return fmt.Errorf("portal applier for %s given a %s ruleset", a.fam, rs.Family)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var stale []StaleChain
	if full {
		a.jumpsOK = false
		var err error
		if stale, err = a.findStale(ctx); err != nil {
			return err
		}
	}
	if err := a.restore.Restore(ctx, Payload(rs, stale)); err != nil {
		return err
	}
	a.written = countRules(rs)
	for _, s := range stale {
		klog.InfoS("Removed a stale userspace-proxy chain", "family", a.fam, "table", s.Table, "chain", s.Name)
	}
	if !a.jumpsOK {
		added, err := a.restore.EnsureJumps(ctx, Jumps())
		for _, j := range added {
			klog.InfoS("Added a portal jump rule", "family", a.fam, "table", j.Table, "chain", j.Chain, "target", j.Target())
		}
		if err != nil {
			return fmt.Errorf("portal jump rules: %w", err)
		}
		a.jumpsOK = true
	}
	return nil
}

// findStale reads the tables that may hold stale chains.
func (a *Applier) findStale(ctx context.Context) ([]StaleChain, error) {
	var out []StaleChain
	for table := range staleChainNames() {
		save, err := a.restore.Save(ctx, table)
		if err != nil {
			return nil, fmt.Errorf("looking for stale chains: %w", err)
		}
		found, err := findStale(table, save)
		if err != nil {
			return nil, fmt.Errorf("looking for stale chains in the %s table: %w", table, err)
		}
		out = append(out, found...)
	}
	return out, nil
}

// SupportsSocketMatch says whether this family's iptables can check the
// receiving socket (-m socket --transparent), by
// restoring a probe chain that is gone again at the end of the same
// transaction.
func (a *Applier) SupportsSocketMatch(ctx context.Context) error {
	const probe = "KPROXY-SOCKET-PROBE"
	payload := "*filter\n:" + probe + " - [0:0]\n" +
		"-A " + probe + " -m socket --transparent --nowildcard -j RETURN\n" +
		"-F " + probe + "\n-X " + probe + "\nCOMMIT\n"
	if err := a.restore.Restore(ctx, []byte(payload)); err != nil {
		return fmt.Errorf("probing -m socket --transparent: %w", err)
	}
	return nil
}
