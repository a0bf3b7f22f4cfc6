// Package handles holds the narrow interfaces the IPVS mode uses to reach
// the kernel (the IPVS handle, kube-ipvs0's addresses, ipsets), their real
// implementations over netlink, and the error classification both the real
// kernel and the fakes (redirect/modes/ipvs/fakeipvs) follow.
package handles

import (
	"errors"
	"net/netip"
	"syscall"

	"github.com/moby/ipvs"
	"github.com/vishvananda/netlink/nl"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

// DummyLink is the dummy interface the mode binds service addresses to.
const DummyLink = "kube-ipvs0"

// IPVS is the part of an IPVS handle the mode uses; *ipvs.Handle has it.
// The kernel answers ESRCH for a service that does not exist, ENOENT for a
// destination that does not exist or an unknown scheduler, EEXIST for a
// service or destination that already does, ERANGE for a negative weight.
// It looks the service up first: NewService of an existing service is
// EEXIST and UpdateService of a missing one ESRCH, whatever the scheduler.
// GetDestinations of a missing service lists nothing, without error.
// (contract_*_test.go check the fakes against the kernel.)
type IPVS interface {
	GetServices() ([]*ipvs.Service, error)
	NewService(s *ipvs.Service) error
	UpdateService(s *ipvs.Service) error
	DelService(s *ipvs.Service) error
	GetDestinations(s *ipvs.Service) ([]*ipvs.Destination, error)
	NewDestination(s *ipvs.Service, d *ipvs.Destination) error
	UpdateDestination(s *ipvs.Service, d *ipvs.Destination) error
	DelDestination(s *ipvs.Service, d *ipvs.Destination) error
	Flush() error
}

var _ IPVS = (*ipvs.Handle)(nil)

// Link is kube-ipvs0 and its addresses, as one family's handle sees them:
// Addrs lists that family's addresses only. AddAddr of a present address
// fails with EEXIST, DelAddr of an absent one with EADDRNOTAVAIL; every
// call but EnsureLink fails with ENODEV while the link does not exist.
type Link interface {
	// EnsureLink creates the dummy link (down, as kube-proxy leaves it) if
	// it is missing.
	EnsureLink() error
	Addrs() ([]netip.Addr, error)
	AddAddr(a netip.Addr) error
	DelAddr(a netip.Addr) error
	DeleteLink() error
}

// IPSets manages ipsets. Create of an existing set fails with EEXIST;
// Destroy of a set iptables still references with IPSET_ERR_BUSY; any call
// on a missing set with ENOENT; Add of a present member and Del of an
// absent one with IPSET_ERR_EXIST; Add or Del of a member the set's type or
// family cannot hold with IPSET_ERR_PROTOCOL, of a zero-length network
// (0.0.0.0/0) with IPSET_ERR_INVALID_CIDR. A hash:ip,port,net member is
// kept as its network: 198.19.1.5/24 lists as 198.19.1.0/24.
type IPSets interface {
	Create(spec desired.SetSpec) error
	Destroy(name string) error
	List(name string) ([]desired.Entry, error)
	Add(name string, e desired.Entry) error
	Del(name string, e desired.Entry) error
}

// Kernel errors the fakes return and the reconciler classifies.
var (
	ErrSetMember = nl.IPSetError(nl.IPSET_ERR_EXIST)
	ErrSetBusy   = nl.IPSetError(nl.IPSET_ERR_BUSY)
)

// IsNoService reports the kernel's "no such service" (ESRCH).
func IsNoService(err error) bool { return errors.Is(err, syscall.ESRCH) }

// IsNotFound reports a missing destination, set or address.
func IsNotFound(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.EADDRNOTAVAIL)
}

// IsExist reports that what was being created already exists.
func IsExist(err error) bool { return errors.Is(err, syscall.EEXIST) }

// IsSetMember reports ipset's "already added" on Add, "not added" on Del:
// either way the set already holds what was asked.
func IsSetMember(err error) bool {
	var e nl.IPSetError
	return errors.As(err, &e) && e == ErrSetMember
}
