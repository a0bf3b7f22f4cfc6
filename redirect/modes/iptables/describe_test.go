package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/sync/servicemap"
)

func TestProgrammedNamesTheChainsWritten(t *testing.T) {
	web, empty := name("web", "http"), name("empty", "http")
	h := newHarness(t, 0)
	chains := func(n servicemap.ServicePortName) string {
		var out []string
		for _, c := range h.mode.Programmed()(n).Chains {
			out = append(out, fmt.Sprintf("%s/%s/%s", c.Family, c.Table, c.Name))
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	if got := chains(web); got != "" {
		t.Errorf("before any sync: %q, want nothing", got)
	}
	webPort := svc(web, "198.18.0.10", 1, 2)
	for _, tc := range []struct {
		what        string
		full        bool
		ports       []*servicemap.ServicePort
		changed     []servicemap.ServicePortName
		removed     []*servicemap.ServicePort
		port        servicemap.ServicePortName
		want        string
		wantNoteFor bool
	}{
		{what: "full sync", full: true, ports: []*servicemap.ServicePort{webPort, svc(empty, "198.18.0.11")}, port: web,
			want: "IPv4/nat/" + rules.EndpointChain(web, ep(1)) + " IPv4/nat/" + rules.EndpointChain(web, ep(2)) + " IPv4/nat/" + rules.ServiceChain(web)},
		{what: "no endpoints: no chain of its own", full: true, ports: []*servicemap.ServicePort{webPort, svc(empty, "198.18.0.11")}, port: empty, wantNoteFor: true},
		{what: "partial sync drops an endpoint", ports: []*servicemap.ServicePort{svc(web, "198.18.0.10", 2)}, changed: []servicemap.ServicePortName{web}, port: web,
			want: "IPv4/nat/" + rules.EndpointChain(web, ep(2)) + " IPv4/nat/" + rules.ServiceChain(web)},
		{what: "partial sync removes the port", changed: []servicemap.ServicePortName{web}, removed: []*servicemap.ServicePort{webPort}, port: web, wantNoteFor: true},
	} {
		if err := h.sync(t, tc.full, tc.changed, tc.removed, tc.ports...); err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		want := strings.Fields(tc.want)
		slices.Sort(want)
		if got := chains(tc.port); got != strings.Join(want, " ") {
			t.Errorf("%s: chains %q, want %q", tc.what, got, want)
		}
		if note := h.mode.Programmed()(tc.port).Note; (note != "") != tc.wantNoteFor {
			t.Errorf("%s: note %q", tc.what, note)
		}
	}
}

// TestProgrammedWhileSyncing reads what was programmed while syncs write
// it; run with -race.
func TestProgrammedWhileSyncing(t *testing.T) {
	h := newHarness(t, 0)
	web := name("web", "http")
	if err := h.sync(t, true, nil, nil, svc(web, "198.18.0.10", 1)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = h.mode.Programmed()(web)
			}
		}
	}()
	for i := range 50 {
		full := i%5 == 0
		if err := h.sync(t, full, []servicemap.ServicePortName{web}, nil, svc(web, "198.18.0.10", 1+i%3)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// ep is endpoint 198.19.1.<i>:8080 as svc makes it.
func ep(i int) netip.AddrPort { return netip.MustParseAddrPort(fmt.Sprintf("198.19.1.%d:8080", i)) }
