package ipvsscale

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/moby/ipvs"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// Handles are the three kernel handles a reconciler works through.
type Handles struct {
	IPVS   handles.IPVS
	Link   handles.Link
	IPSets handles.IPSets
}

// Op kinds. A read lists kernel state; an ensure creates something only if
// it is missing (every re-read of the kernel repeats them); a write
// changes the kernel.
const (
	Read   = "read"
	Ensure = "ensure"
	Write  = "write"
)

// opKind classifies a handle method by what it does to the kernel.
func opKind(op string) string {
	switch op {
	case "IPVS.GetServices", "IPVS.GetDestinations", "Link.Addrs", "IPSets.List":
		return Read
	case "Link.EnsureLink", "IPSets.Create":
		return Ensure
	}
	return Write
}

// Counts are handle calls by kind. Each call is one netlink request and
// its answer, except that a Link call first looks the link up by name (a
// second request not counted here).
type Counts struct {
	Reads, Ensures, Writes int
}

// Total is every call.
func (c Counts) Total() int { return c.Reads + c.Ensures + c.Writes }

// Counter tallies handle calls by method ("IPVS.NewDestination"). It is not
// safe for concurrent use, as the reconciler it watches is not.
type Counter struct {
	calls map[string]int
}

// Count wraps h so that every call is tallied in the returned Counter.
func Count(h Handles) (Handles, *Counter) {
	c := &Counter{calls: make(map[string]int)}
	return Handles{
		IPVS:   countingIPVS{inner: h.IPVS, c: c},
		Link:   countingLink{inner: h.Link, c: c},
		IPSets: countingIPSets{inner: h.IPSets, c: c},
	}, c
}

func (c *Counter) note(op string) { c.calls[op]++ }

// Reset forgets every call so far.
func (c *Counter) Reset() { clear(c.calls) }

// Calls returns how often one method ran ("IPVS.NewService").
func (c *Counter) Calls(op string) int { return c.calls[op] }

// Counts sums the calls by kind.
func (c *Counter) Counts() Counts {
	var out Counts
	for op, n := range c.calls {
		switch opKind(op) {
		case Read:
			out.Reads += n
		case Ensure:
			out.Ensures += n
		default:
			out.Writes += n
		}
	}
	return out
}

// String lists the calls by method, sorted: "IPVS.NewService=3 Link.AddAddr=3".
func (c *Counter) String() string {
	var b strings.Builder
	for _, op := range slices.Sorted(maps.Keys(c.calls)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", op, c.calls[op])
	}
	return b.String()
}

type countingIPVS struct {
	inner handles.IPVS
	c     *Counter
}

func (h countingIPVS) GetServices() ([]*ipvs.Service, error) {
	h.c.note("IPVS.GetServices")
	return h.inner.GetServices()
}

func (h countingIPVS) NewService(s *ipvs.Service) error {
	h.c.note("IPVS.NewService")
	return h.inner.NewService(s)
}

func (h countingIPVS) UpdateService(s *ipvs.Service) error {
	h.c.note("IPVS.UpdateService")
	return h.inner.UpdateService(s)
}

func (h countingIPVS) DelService(s *ipvs.Service) error {
	h.c.note("IPVS.DelService")
	return h.inner.DelService(s)
}

func (h countingIPVS) GetDestinations(s *ipvs.Service) ([]*ipvs.Destination, error) {
	h.c.note("IPVS.GetDestinations")
	return h.inner.GetDestinations(s)
}

func (h countingIPVS) NewDestination(s *ipvs.Service, d *ipvs.Destination) error {
	h.c.note("IPVS.NewDestination")
	return h.inner.NewDestination(s, d)
}

func (h countingIPVS) UpdateDestination(s *ipvs.Service, d *ipvs.Destination) error {
	h.c.note("IPVS.UpdateDestination")
	return h.inner.UpdateDestination(s, d)
}

func (h countingIPVS) DelDestination(s *ipvs.Service, d *ipvs.Destination) error {
	h.c.note("IPVS.DelDestination")
	return h.inner.DelDestination(s, d)
}

func (h countingIPVS) Flush() error {
	h.c.note("IPVS.Flush")
	return h.inner.Flush()
}

type countingLink struct {
	inner handles.Link
	c     *Counter
}

func (l countingLink) EnsureLink() error {
	l.c.note("Link.EnsureLink")
	return l.inner.EnsureLink()
}

func (l countingLink) Addrs() ([]netip.Addr, error) {
	l.c.note("Link.Addrs")
	return l.inner.Addrs()
}

func (l countingLink) AddAddr(a netip.Addr) error {
	l.c.note("Link.AddAddr")
	return l.inner.AddAddr(a)
}

func (l countingLink) DelAddr(a netip.Addr) error {
	l.c.note("Link.DelAddr")
	return l.inner.DelAddr(a)
}

func (l countingLink) DeleteLink() error {
	l.c.note("Link.DeleteLink")
	return l.inner.DeleteLink()
}

type countingIPSets struct {
	inner handles.IPSets
	c     *Counter
}

func (s countingIPSets) Create(spec desired.SetSpec) error {
	s.c.note("IPSets.Create")
	return s.inner.Create(spec)
}

func (s countingIPSets) Destroy(name string) error {
	s.c.note("IPSets.Destroy")
	return s.inner.Destroy(name)
}

func (s countingIPSets) List(name string) ([]desired.Entry, error) {
	s.c.note("IPSets.List")
	return s.inner.List(name)
}

func (s countingIPSets) Add(name string, e desired.Entry) error {
	s.c.note("IPSets.Add")
	return s.inner.Add(name, e)
}

func (s countingIPSets) Del(name string, e desired.Entry) error {
	s.c.note("IPSets.Del")
	return s.inner.Del(name, e)
}
