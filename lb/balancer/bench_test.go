package balancer

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// benchPicker returns the picker of a service with n ready endpoints.
func benchPicker(b *testing.B, n int, opts ...svcOpt) *world {
	w := newWorld(b, Config{})
	eps := make([]discovery.Endpoint, n)
	for i := range eps {
		eps[i] = ep(fmt.Sprintf("198.19.1.%d", i+1))
	}
	w.apply([]*v1.Service{service("s", opts...)}, []*discovery.EndpointSlice{slice("s", "s-1", eps...)})
	return w
}

func BenchmarkPick(b *testing.B) {
	for _, n := range []int{3, 100} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := benchPicker(b, n).b.Picker(key("s", Internal, ipfamily.IPv4))
			b.ReportAllocs()
			for b.Loop() {
				if len(p.Pick(clientA)) != n {
					b.Fatal("short pick")
				}
			}
		})
	}
}

// BenchmarkPickAffinity picks for 1024 clients that are all pinned, the
// steady state of a ClientIP service.
func BenchmarkPickAffinity(b *testing.B) {
	w := benchPicker(b, 3, affinity(10800))
	p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
	clients := benchClients(1024)
	for i, c := range clients {
		p.Connected(c, netip.MustParseAddrPort(fmt.Sprintf("198.19.1.%d:8080", i%3+1)))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p.Pick(clients[i&1023])
		i++
	}
}

func BenchmarkPickParallel(b *testing.B) {
	p := benchPicker(b, 3).b.Picker(key("s", Internal, ipfamily.IPv4))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.Pick(clientA)
		}
	})
}

func BenchmarkPickAffinityParallel(b *testing.B) {
	w := benchPicker(b, 3, affinity(10800))
	p := w.b.Picker(key("s", Internal, ipfamily.IPv4))
	clients := benchClients(1024)
	for i, c := range clients {
		p.Connected(c, netip.MustParseAddrPort(fmt.Sprintf("198.19.1.%d:8080", i%3+1)))
	}
	var next atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(512))
		for pb.Next() {
			p.Pick(clients[i&1023])
			i++
		}
	})
}

// BenchmarkUpdate measures an Update over 10,000 service ports, all with
// pickers, where one port changed: the cost of a typical sync.
func BenchmarkUpdate(b *testing.B) {
	const ports = 10000
	w := newWorld(b, Config{})
	for i := range ports {
		name := fmt.Sprintf("s%05d", i)
		w.tr.OnServiceUpdate(service(name))
		w.tr.OnEndpointSliceUpdate(slice(name, name+"-1", ep("198.19.1.1"), ep("198.19.1.2")))
	}
	w.sync()
	for i := range ports {
		w.b.Picker(key(fmt.Sprintf("s%05d", i), Internal, ipfamily.IPv4))
	}
	snaps := make([]*servicemap.Snapshot, 2)
	for j := range snaps {
		w.tr.OnEndpointSliceUpdate(slice("s00000", "s00000-1", ep("198.19.1.1"), ep(fmt.Sprintf("198.19.1.%d", 3+j))))
		snaps[j], _ = w.tr.Snapshot()
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w.b.Update(snaps[i&1])
		i++
	}
}

func benchClients(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{198, 19, byte(100 + i/256), byte(i % 256)})
	}
	return out
}
