package fakeipvs

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/ipfamily"
)

func vs(addr string, sched string) desired.VirtualServer {
	return desired.VirtualServer{Key: desired.Key{Addr: netip.MustParseAddr(addr), Protocol: v1.ProtocolTCP, Port: 80}, Scheduler: sched}
}

func rs(ap string) desired.RealServer {
	a := netip.MustParseAddrPort(ap)
	return desired.RealServer{Addr: a.Addr(), Port: a.Port(), Weight: 1}
}

// TestIPVSFailsLikeTheKernel runs each call against a table holding one
// service with one destination.
func TestIPVSFailsLikeTheKernel(t *testing.T) {
	have, missing := handles.ToService(vs("198.18.0.1", "rr")), handles.ToService(vs("198.18.0.2", "rr"))
	dest, other := handles.ToDestination(rs("198.19.1.11:8080")), handles.ToDestination(rs("198.19.1.12:8080"))
	tests := []struct {
		name string
		call func(f *IPVS) error
		want error
	}{
		{"new existing service", func(f *IPVS) error { return f.NewService(have) }, syscall.EEXIST},
		{"unknown scheduler", func(f *IPVS) error { return f.NewService(handles.ToService(vs("198.18.0.2", "nope"))) }, syscall.ENOENT},
		{"update missing service", func(f *IPVS) error { return f.UpdateService(missing) }, syscall.ESRCH},
		{"delete missing service", func(f *IPVS) error { return f.DelService(missing) }, syscall.ESRCH},
		{"destination of missing service", func(f *IPVS) error { return f.NewDestination(missing, dest) }, syscall.ESRCH},
		{"new existing destination", func(f *IPVS) error { return f.NewDestination(have, dest) }, syscall.EEXIST},
		{"update missing destination", func(f *IPVS) error { return f.UpdateDestination(have, other) }, syscall.ENOENT},
		{"delete missing destination", func(f *IPVS) error { return f.DelDestination(have, other) }, syscall.ENOENT},
		{"hook", func(f *IPVS) error {
			f.Hook = func(op, _ string) error {
				if op == "NewDestination" {
					return syscall.EBUSY
				}
				return nil
			}
			return f.NewDestination(have, other)
		}, syscall.EBUSY},
		{"valid update", func(f *IPVS) error { return f.UpdateDestination(have, dest) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &IPVS{}
			f.Add(vs("198.18.0.1", "rr"), rs("198.19.1.11:8080"))
			err := tt.call(f)
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if f.Total() != 1 {
				t.Errorf("counted %d calls, want 1", f.Total())
			}
		})
	}
}

func TestListedServicesCarryTheHashedFlag(t *testing.T) {
	f := &IPVS{}
	f.Add(vs("198.18.0.1", "rr"))
	list, err := f.GetServices()
	if err != nil || len(list) != 1 || list[0].Flags&desired.FlagHashed == 0 {
		t.Fatalf("GetServices = %+v, %v; want one service flagged hashed", list, err)
	}
	if got, ok := handles.FromService(list[0]); !ok || got != vs("198.18.0.1", "rr") {
		t.Errorf("FromService = %+v, want the hashed flag dropped", got)
	}
}

func TestLinkAndSetsFailLikeTheKernel(t *testing.T) {
	a := netip.MustParseAddr("198.18.0.1")
	spec := desired.SetSpecs(ipfamily.IPv4)[1] // KUBE-CLUSTER-IP, hash:ip,port
	member := desired.Entry{IP: a, Protocol: v1.ProtocolTCP, Port: 80}
	tests := []struct {
		name string
		call func(l *Link, s *IPSets) error
		want func(error) bool
	}{
		{"address before the link", func(l *Link, _ *IPSets) error { return l.AddAddr(a) }, func(e error) bool { return errors.Is(e, syscall.ENODEV) }},
		{"address twice", func(l *Link, _ *IPSets) error { _ = l.EnsureLink(); _ = l.AddAddr(a); return l.AddAddr(a) }, handles.IsExist},
		{"delete absent address", func(l *Link, _ *IPSets) error { _ = l.EnsureLink(); return l.DelAddr(a) }, handles.IsNotFound},
		{"set twice", func(_ *Link, s *IPSets) error { _ = s.Create(spec); return s.Create(spec) }, handles.IsExist},
		{"member of missing set", func(_ *Link, s *IPSets) error { return s.Add(spec.Name, member) }, handles.IsNotFound},
		{"member twice", func(_ *Link, s *IPSets) error {
			_ = s.Create(spec)
			_ = s.Add(spec.Name, member)
			return s.Add(spec.Name, member)
		}, handles.IsSetMember},
		{"delete absent member", func(_ *Link, s *IPSets) error { _ = s.Create(spec); return s.Del(spec.Name, member) }, handles.IsSetMember},
		{"wrong shape", func(_ *Link, s *IPSets) error { _ = s.Create(spec); return s.Add(spec.Name, desired.Entry{Port: 80}) }, func(e error) bool { return e != nil && !handles.IsSetMember(e) }},
		{"destroy referenced", func(_ *Link, s *IPSets) error {
			_ = s.Create(spec)
			s.SetReferenced(spec.Name, true)
			return s.Destroy(spec.Name)
		},
			func(e error) bool { return errors.Is(e, handles.ErrSetBusy) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(&Link{}, &IPSets{}); !tt.want(err) {
				t.Errorf("err = %v, not the kernel's", err)
			}
		})
	}
}
