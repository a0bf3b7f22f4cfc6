package portal

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"

	"github.com/coreos/go-iptables/iptables"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/kernel"
)

// JumpRules is the part of go-iptables the Applier uses to hook its chains
// into the built-in ones; *iptables.IPTables implements it, and so does
// fakeiptables.Fake.
type JumpRules interface {
	Exists(table, chain string, rulespec ...string) (bool, error)
	Insert(table, chain string, pos int, rulespec ...string) error
	Append(table, chain string, rulespec ...string) error
}

// Jump is one rule in a built-in chain that enters one of kproxy's chains.
type Jump struct {
	Table, Chain string
	// First: inserted at the top of Chain; otherwise appended.
	First bool
	Args  []string
}

const (
	portalsComment  = "handle ClusterIPs; NOTE: this must be before the NodePort rules"
	nodePortComment = "handle service NodePorts; NOTE: this must be the last rule in the chain"
)

// Jumps lists the jump rules, in the order they are ensured. The nat ones
// are kube-proxy's userspace mode's, word for word: portals first in
// PREROUTING and OUTPUT, NodePorts (which match broadly, on local
// destinations) last, so a service IP that is also local is served as a
// service IP.
func Jumps() []Jump {
	nodePort := func(target string) []string {
		return []string{"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", nodePortComment, "-j", target}
	}
	firewall := []string{"-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", "kproxy loadBalancerSourceRanges", "-j", ChainFirewall}
	return []Jump{
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
	Family  kernel.Family
	Backend kernel.Backend // from kernel.Features.Backend
	// Runner runs iptables-restore and iptables-save; nil means kernel.ExecRunner.
	Runner kernel.Runner
	// Jumps ensures the jump rules; nil means go-iptables on Backend's binary.
	Jumps JumpRules
}

// Applier writes Rulesets of one family into the kernel.
type Applier struct {
	fam     kernel.Family
	backend kernel.Backend
	runner  kernel.Runner
	jumps   JumpRules

	mu sync.Mutex
	// jumpsOK: the jump rules were found or made since the last full sync.
	jumpsOK bool
}

// NewApplier checks cfg and, without cfg.Jumps, opens go-iptables on the
// backend's binary. Nothing is written until Apply.
func NewApplier(cfg Config) (*Applier, error) {
	if cfg.Family != kernel.IPv4 && cfg.Family != kernel.IPv6 {
		return nil, fmt.Errorf("portal applier: unknown IP family %q", cfg.Family)
	}
	if cfg.Backend != kernel.NFT && cfg.Backend != kernel.Legacy {
		return nil, fmt.Errorf("portal applier: unknown iptables backend %q", cfg.Backend)
	}
	a := &Applier{fam: cfg.Family, backend: cfg.Backend, runner: cfg.Runner, jumps: cfg.Jumps}
	if a.runner == nil {
		a.runner = kernel.ExecRunner{}
	}
	if a.jumps == nil {
		path, err := exec.LookPath(cfg.Backend.Command(cfg.Family))
		if err != nil {
			return nil, fmt.Errorf("portal applier: %w", err)
		}
		proto := iptables.ProtocolIPv4
		if cfg.Family == kernel.IPv6 {
			proto = iptables.ProtocolIPv6
		}
		ipt, err := iptables.New(iptables.Path(path), iptables.IPFamily(proto), iptables.Timeout(5))
		if err != nil {
			return nil, fmt.Errorf("portal applier: opening %s: %w", path, err)
		}
		a.jumps = ipt
	}
	return a, nil
}

// Apply makes kproxy's chains hold exactly rs, in one iptables-restore
// --noflush. With full set (the first sync, a resync, a retry after a
// failure) it also removes stale chains of an older userspace proxy and
// re-checks the jump rules from the built-in chains, which someone may have
// flushed; otherwise the jumps are only checked until they were once in
// place. A failed restore is a *RestoreError naming the failing rule; the
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
	payload := Payload(rs, stale)
	cmd := a.backend.RestoreCommand(a.fam)
	if _, err := a.runner.Run(ctx, payload, cmd, "--noflush", "--wait=5"); err != nil {
		var ce *kernel.CommandError
		stderr := ""
		if errors.As(err, &ce) {
			stderr = ce.Stderr
		}
		return newRestoreError(cmd, payload, stderr, err)
	}
	for _, s := range stale {
		klog.InfoS("Removed a stale userspace-proxy chain", "family", a.fam, "table", s.Table, "chain", s.Name)
	}
	if !a.jumpsOK {
		if err := a.ensureJumps(); err != nil {
			return err
		}
		a.jumpsOK = true
	}
	return nil
}

// ensureJumps adds each missing jump rule.
func (a *Applier) ensureJumps() error {
	for _, j := range Jumps() {
		ok, err := a.jumps.Exists(j.Table, j.Chain, j.Args...)
		if err != nil {
			return fmt.Errorf("checking the %s jump rule in %s/%s: %w", j.Args[len(j.Args)-1], j.Table, j.Chain, err)
		}
		if ok {
			continue
		}
		if j.First {
			err = a.jumps.Insert(j.Table, j.Chain, 1, j.Args...)
		} else {
			err = a.jumps.Append(j.Table, j.Chain, j.Args...)
		}
		if err != nil {
			return fmt.Errorf("adding the %s jump rule to %s/%s: %w", j.Args[len(j.Args)-1], j.Table, j.Chain, err)
		}
		klog.InfoS("Added a portal jump rule", "family", a.fam, "table", j.Table, "chain", j.Chain, "target", j.Args[len(j.Args)-1])
	}
	return nil
}

// findStale reads the tables that may hold stale chains.
func (a *Applier) findStale(ctx context.Context) ([]StaleChain, error) {
	var out []StaleChain
	for table := range staleChainNames() {
		save, err := a.runner.Run(ctx, nil, a.backend.SaveCommand(a.fam), "-t", table)
		if err != nil {
			return nil, fmt.Errorf("reading the %s table to find stale chains: %w", table, err)
		}
		out = append(out, findStale(table, string(save))...)
	}
	return out, nil
}
