package replyroute

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/sync/ipfamily"
)

const (
	// NFTable is the nftables table (ip and ip6 families) of SocketMatch.
	NFTable = "kproxy-keep-source"
	// Mark is the packet mark bit SocketMatch sets on the replies to
	// transparent sockets; one rule sends marked packets to Table. Clear of
	// kube-proxy's (0x4000, 0x8000) and of the low bits CNI plugins use.
	Mark = 0x00100000

	nftChain = "prerouting"
)

// SocketMatch is a keepsource.Steering for a family with netfilter: an
// nftables chain marks every packet a transparent socket of the node will
// take (`socket transparent 1`), and one policy rule (fwmark) sends the
// marked packets to Table. Per flow it does nothing: the kernel's socket
// lookup finds the flow, so its cost does not grow with the flows open, as
// the per-flow rules' does.
type SocketMatch struct {
	fam ipfamily.Family
	nft knftables.Interface
}

var _ keepsource.Steering = (*SocketMatch)(nil)

// NewSocketMatch programs fam's chain, rule and table route; an error
// (nftables without the family, no socket expression) leaves the caller
// to fall back to the per-flow rules.
func NewSocketMatch(ctx context.Context, fam ipfamily.Family) (*SocketMatch, error) {
	nftFam := knftables.IPv4Family
	if fam == ipfamily.IPv6 {
		nftFam = knftables.IPv6Family
	}
	nft, err := knftables.New(nftFam, NFTable, knftables.EmulateDestroy)
	if err != nil {
		return nil, fmt.Errorf("nftables for %s: %w", fam, err)
	}
	s := &SocketMatch{fam: fam, nft: nft}
	if err := s.Repair(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Add does nothing: the chain's socket match finds the flow's socket.
func (s *SocketMatch) Add(keepsource.Flow) error { return nil }

// Remove does nothing either.
func (s *SocketMatch) Remove(keepsource.Flow) error { return nil }

// Repair writes the chain (flushed and written again: a no-op when
// intact), the fwmark rule and the table's route, putting back whatever
// someone removed.
func (s *SocketMatch) Repair(ctx context.Context) error {
	tx := s.nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("kproxy: replies to the userspace relays' dials from clients' addresses")})
	tx.Add(&knftables.Chain{Name: nftChain, Type: knftables.PtrTo(knftables.FilterType),
		Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.ManglePriority)})
	tx.Flush(&knftables.Chain{Name: nftChain})
	tx.Add(&knftables.Rule{Chain: nftChain, Rule: fmt.Sprintf("socket transparent 1 meta mark set meta mark | 0x%08x", Mark)})
	if err := s.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("writing the %s nftables table %s: %w", s.fam, NFTable, err)
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("opening a route netlink socket: %w", err)
	}
	defer h.Close()
	nlFam := s.fam.Domain()
	if err := ensureTable(h, nlFam); err != nil {
		return err
	}
	if err := h.RuleAdd(markRule(nlFam)); err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("adding the %s mark rule: %w", s.fam, err)
	}
	return nil
}

// markRule sends packets with Mark to Table.
func markRule(fam int) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = fam
	r.Priority = Priority
	r.Table = Table
	r.Protocol = Protocol
	r.Mark = Mark
	mask := uint32(Mark)
	r.Mask = &mask
	return r
}

// CleanNFTables deletes SocketMatch's tables, where nftables has them.
func CleanNFTables(ctx context.Context) error {
	var errs []error
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		nft, err := knftables.New(fam, NFTable, knftables.EmulateDestroy)
		if err != nil {
			continue // no nftables for the family: nothing of ours there
		}
		tx := nft.NewTransaction()
		tx.Destroy(&knftables.Table{})
		if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting the %s nftables table %s: %w", fam, NFTable, err))
		}
	}
	return errors.Join(errs...)
}

// ByFamily steers each flow with its family's Steering; a family without
// one refuses (the relay then dials from the node).
type ByFamily struct {
	IPv4, IPv6 keepsource.Steering
}

var _ keepsource.Steering = ByFamily{}

func (b ByFamily) of(f keepsource.Flow) (keepsource.Steering, error) {
	s := b.IPv4
	if f.Local.Addr().Unmap().Is6() {
		s = b.IPv6
	}
	if s == nil {
		return nil, fmt.Errorf("no reply steering for %v", f.Local.Addr())
	}
	return s, nil
}

func (b ByFamily) Add(f keepsource.Flow) error {
	s, err := b.of(f)
	if err != nil {
		return err
	}
	return s.Add(f)
}

func (b ByFamily) Remove(f keepsource.Flow) error {
	s, err := b.of(f)
	if err != nil {
		return err
	}
	return s.Remove(f)
}
