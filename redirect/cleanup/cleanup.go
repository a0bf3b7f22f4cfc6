// Package cleanup removes what kube-proxy's and kproxy's proxy modes leave in
// the kernel: iptables chains and the rules jumping to them (both backends,
// both families), ipvs mode's ipsets, kube-ipvs0 link and IPVS services,
// the nftables "kube-proxy" tables, and the userspace mode's local routes. Sets and tables go over netlink, so only
// the iptables tools are needed. Chains kubelet owns and everything
// unrelated stay. Cleaning a clean node changes nothing.
package cleanup

import (
	"context"
	"errors"
	"fmt"

	"github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/localroute"
	"kproxy.dev/kproxy/redirect/replyroute"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// lockWait is how long iptables-restore waits for the xtables lock (-w).
const lockWait = "5"

// Links is the link surface cleanup needs.
type Links interface {
	// LinkExists reports whether a link of that name exists.
	LinkExists(name string) (bool, error)
	DeleteLink(name string) error
}

// IPVS is the part of an IPVS handle cleanup needs (*ipvs.Handle has it).
type IPVS interface {
	GetServices() ([]*ipvs.Service, error)
	DelService(s *ipvs.Service) error
	Close()
}

// Cleaner removes proxy leftovers. Use New, or fill in fakes in tests.
type Cleaner struct {
	Runner   kernel.Runner
	Links    Links
	IPSets   IPSets
	NFTables NFTables
	OpenIPVS func() (IPVS, error)
	// Routes are the local routes of the userspace mode's local portals.
	Routes localroute.Routes
	// ReplyRules removes the userspace mode's policy rules and table for
	// the replies to its transparent dials (redirect/replyroute); nil
	// removes none (tests with fakes).
	ReplyRules func() error
}

// New returns a Cleaner working on the real node.
func New() *Cleaner {
	return &Cleaner{
		Runner:     kernel.ExecRunner{},
		Links:      netlinkLinks{},
		IPSets:     netlinkIPSets{},
		NFTables:   netlinkNFTables{},
		Routes:     &localroute.Netlink{},
		ReplyRules: replyroute.Clean,
		OpenIPVS: func() (IPVS, error) {
			h, err := ipvs.New("")
			if err != nil {
				return nil, err
			}
			return h, nil
		},
	}
}

// Clean removes on the real node what scope says goes; see Cleaner.Clean.
func Clean(ctx context.Context, f kernel.Features, scope Scope) error {
	return New().Clean(ctx, f, scope)
}

// Clean removes what the modes in scope.Remove installed but scope.Keep
// does not own, so a node switched from one mode to another does not run
// both, and --cleanup (nothing kept) leaves no proxy state. What the kept
// mode owns stays so traffic keeps flowing until its first sync rewrites it.
// f (from kernel.Detect) says which backends and tools exist; absent ones
// are skipped. A backend Detect did not probe (legacy on an nft node without
// legacy tables) is still read, as its save creates nothing and tables may
// have appeared since; only tables it shows are restored. Every step runs
// even when an earlier one fails; the error joins all failures, each naming
// what failed.
func (c *Cleaner) Clean(ctx context.Context, f kernel.Features, scope Scope) error {
	sc := scope.resolve()
	logger := klog.FromContext(ctx)
	var errs []error
	if link, ok := sc.ipvsLink(); ok {
		errs = append(errs, c.cleanIPVS(ctx, f, link))
	}
	errs = append(errs, c.deleteLink(ctx, kernel.ProbeLink))
	for _, fam := range ipfamily.All() {
		for _, b := range kernel.Backends() {
			if t := f.Family(fam).Get(b); !t.Usable && !t.NotProbed {
				continue
			}
			errs = append(errs, c.cleanIPTables(ctx, b, fam, scope))
		}
	}
	// After iptables: rules matching a set keep it busy. Without ip_set
	// loaded there is no set, and listing them would load it.
	if f.IPSet.Present {
		errs = append(errs, c.cleanIPSets(ctx, sc))
	}
	errs = append(errs, c.cleanNFTables(ctx, sc))
	if sc.removeLocalRoutes() {
		if err := localroute.Clean(c.Routes); err != nil {
			errs = append(errs, fmt.Errorf("removing the userspace mode's local routes: %w", err))
		}
		if c.ReplyRules != nil {
			if err := c.ReplyRules(); err != nil {
				errs = append(errs, fmt.Errorf("removing the userspace mode's reply rules: %w", err))
			}
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		logger.Error(err, "Cleaning up proxy leftovers failed in part")
	} else {
		logger.V(2).Info("Cleaned up proxy leftovers")
	}
	return err
}

// cleanIPVS removes IPVS services and the kube-ipvs0 link. IPVS services are
// only touched when kube-ipvs0 exists: the link is the evidence that ipvs mode
// ran here, and without it the services may belong to someone else (a load
// balancer daemon). ipvs mode programs every IPVS service it sees, so it
// removes them all, as kube-proxy does.
func (c *Cleaner) cleanIPVS(ctx context.Context, f kernel.Features, ipvsLink string) error {
	exists, err := c.Links.LinkExists(ipvsLink)
	if err != nil {
		return fmt.Errorf("looking up link %s: %w", ipvsLink, err)
	}
	if !exists {
		return nil
	}
	var errs []error
	if f.IPVS.Present {
		errs = append(errs, c.flushIPVS(ctx))
	}
	errs = append(errs, c.deleteLink(ctx, ipvsLink))
	return errors.Join(errs...)
}

func (c *Cleaner) flushIPVS(ctx context.Context) error {
	h, err := c.OpenIPVS()
	if err != nil {
		return fmt.Errorf("opening IPVS: %w", err)
	}
	defer h.Close()
	services, err := h.GetServices()
	if err != nil {
		return fmt.Errorf("listing IPVS services: %w", err)
	}
	var errs []error
	for _, s := range services {
		if err := h.DelService(s); err != nil {
			errs = append(errs, fmt.Errorf("deleting IPVS service %s: %w", describeService(s), err))
		}
	}
	klog.FromContext(ctx).V(2).Info("Deleted IPVS services", "count", len(services)-len(errs))
	return errors.Join(errs...)
}

func describeService(s *ipvs.Service) string {
	if s.FWMark != 0 {
		return fmt.Sprintf("fwmark %d", s.FWMark)
	}
	return fmt.Sprintf("%s:%d/%d", s.Address, s.Port, s.Protocol)
}

func (c *Cleaner) deleteLink(ctx context.Context, name string) error {
	exists, err := c.Links.LinkExists(name)
	if err != nil {
		return fmt.Errorf("looking up link %s: %w", name, err)
	}
	if !exists {
		return nil
	}
	if err := c.Links.DeleteLink(name); err != nil {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted link", "link", name)
	return nil
}

// cleanIPTables restores only tables b's save shows, so a backend with no
// tables (legacy on an nft node) gets none registered.
func (c *Cleaner) cleanIPTables(ctx context.Context, b kernel.Backend, fam ipfamily.Family, scope Scope) error {
	save, err := c.Runner.Run(ctx, nil, b.SaveCommand(fam))
	if err != nil {
		return fmt.Errorf("reading rules with %s: %w", b.SaveCommand(fam), err)
	}
	plans, err := Plan(string(save), scope)
	if err != nil {
		return fmt.Errorf("planning cleanup of %s rules: %w", b.Command(fam), err)
	}
	var errs []error
	for _, p := range plans {
		if _, err := c.Runner.Run(ctx, []byte(p.Input), b.RestoreCommand(fam), "-w", lockWait, "--noflush"); err != nil {
			errs = append(errs, fmt.Errorf("cleaning table %s with %s: %w", p.Table, b.RestoreCommand(fam), err))
			continue
		}
		klog.FromContext(ctx).V(2).Info("Cleaned iptables table", "command", b.RestoreCommand(fam), "table", p.Table)
	}
	return errors.Join(errs...)
}

func (c *Cleaner) cleanIPSets(ctx context.Context, sc resolvedScope) error {
	names, err := c.IPSets.Names()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if !sc.removeSet(name) {
			continue
		}
		if err := c.IPSets.Destroy(name); err != nil {
			errs = append(errs, fmt.Errorf("destroying ipset %s: %w", name, err))
			continue
		}
		klog.FromContext(ctx).V(2).Info("Destroyed ipset", "set", name)
	}
	return errors.Join(errs...)
}

// cleanNFTables deletes the nftables tables that go (kube-proxy's nftables
// mode's, in ip and ip6). It speaks netlink, so a node without the nft tool
// is cleaned too; a kernel without nf_tables has no tables to delete.
func (c *Cleaner) cleanNFTables(ctx context.Context, sc resolvedScope) error {
	tables, err := c.NFTables.Tables()
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tables {
		if !sc.removeNFTable(t.Name) || (t.Family != "ip" && t.Family != "ip6") {
			continue
		}
		if err := c.NFTables.DeleteTable(t); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).V(2).Info("Deleted nftables table", "table", t.String())
	}
	return errors.Join(errs...)
}

// netlinkLinks is the real Links.
type netlinkLinks struct{}

func (netlinkLinks) LinkExists(name string) (bool, error) {
	_, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &notFound):
		return false, nil
	default:
		return false, err
	}
}

func (netlinkLinks) DeleteLink(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkDel(link)
}
