package fakeipvs

import (
	"slices"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink/nl"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/ipfamily"
)

type fakeSet struct {
	spec    desired.SetSpec
	members map[desired.Entry]bool
}

// IPSets is a fake handles.IPSets. Referenced marks sets iptables rules
// still use, which the kernel refuses to destroy.
type IPSets struct {
	Calls

	mu         sync.Mutex
	sets       map[string]*fakeSet
	referenced map[string]bool
}

var _ handles.IPSets = (*IPSets)(nil)

// SetReferenced marks or unmarks a set as used by an iptables rule.
func (s *IPSets) SetReferenced(name string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.referenced == nil {
		s.referenced = make(map[string]bool)
	}
	s.referenced[name] = on
}

func (s *IPSets) Create(spec desired.SetSpec) error {
	if err := s.begin("Create", spec.Name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !knownSetType(spec.Type) {
		return nl.IPSetError(nl.IPSET_ERR_FIND_TYPE)
	}
	if _, ok := s.sets[spec.Name]; ok {
		return syscall.EEXIST
	}
	if s.sets == nil {
		s.sets = make(map[string]*fakeSet)
	}
	s.sets[spec.Name] = &fakeSet{spec: spec, members: make(map[desired.Entry]bool)}
	return nil
}

func (s *IPSets) Destroy(name string) error {
	if err := s.begin("Destroy", name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sets[name]; !ok {
		return syscall.ENOENT
	}
	if s.referenced[name] {
		return handles.ErrSetBusy
	}
	delete(s.sets, name)
	return nil
}

func (s *IPSets) List(name string) ([]desired.Entry, error) {
	if err := s.begin("List", name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set, ok := s.sets[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	out := make([]desired.Entry, 0, len(set.members))
	for e := range set.members {
		out = append(out, e)
	}
	slices.SortFunc(out, desired.Entry.Compare)
	return out, nil
}

func (s *IPSets) member(op, name string, e desired.Entry, apply func(*fakeSet, desired.Entry) error) error {
	if err := s.begin(op, name+" "+e.String()); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set, ok := s.sets[name]
	if !ok {
		return syscall.ENOENT
	}
	if err := checkEntry(set.spec, e); err != nil {
		return err
	}
	// The kernel keeps a member's network, not the address it was given
	// in (198.19.1.5/24 is stored, listed and deleted as 198.19.1.0/24).
	if e.Net.IsValid() {
		e.Net = e.Net.Masked()
	}
	return apply(set, e)
}

func (s *IPSets) Add(name string, e desired.Entry) error {
	return s.member("Add", name, e, func(set *fakeSet, e desired.Entry) error {
		if set.members[e] {
			return handles.ErrSetMember
		}
		set.members[e] = true
		return nil
	})
}

func (s *IPSets) Del(name string, e desired.Entry) error {
	return s.member("Del", name, e, func(set *fakeSet, e desired.Entry) error {
		if !set.members[e] {
			return handles.ErrSetMember
		}
		delete(set.members, e)
		return nil
	})
}

// knownSetType says whether the fake kernel has typ: the mode's types.
func knownSetType(typ string) bool {
	switch typ {
	case desired.BitmapPort, desired.HashIP, desired.HashIPPort, desired.HashIPPortIP, desired.HashIPPortNet:
		return true
	}
	return false
}

// checkEntry refuses an entry whose shape or family does not fit the set,
// as the kernel's set types do.
func checkEntry(spec desired.SetSpec, e desired.Entry) error {
	hasIP, hasProto := e.IP.IsValid(), e.Protocol != ""
	var fits bool
	switch spec.Type {
	case desired.BitmapPort:
		fits = !hasIP && !hasProto
	case desired.HashIP:
		fits = hasIP && !hasProto
	case desired.HashIPPort:
		fits = hasIP && hasProto && !e.IP2.IsValid() && !e.Net.IsValid()
	case desired.HashIPPortIP:
		fits = hasIP && hasProto && e.IP2.IsValid()
	case desired.HashIPPortNet:
		fits = hasIP && hasProto && e.Net.IsValid()
	}
	// An address of the other family arrives in an attribute the set's
	// type does not take: the kernel calls that a protocol error too.
	if !fits || hasIP && e.IP.Is6() != (spec.Family == ipfamily.IPv6) {
		return nl.IPSetError(nl.IPSET_ERR_PROTOCOL)
	}
	// The kernel stores no zero-length prefix (the handle refuses it
	// before asking, with the kernel's code).
	if e.Net.IsValid() && e.Net.Bits() == 0 {
		return nl.IPSetError(nl.IPSET_ERR_INVALID_CIDR)
	}
	return nil
}

// Names lists the existing sets, sorted.
func (s *IPSets) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.sets))
	for n := range s.sets {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
