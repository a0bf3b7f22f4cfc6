package nftables

import (
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

func TestProgrammedNamesTheChainsWritten(t *testing.T) {
	fake := fakeFor(ipfamily.IPv4)
	m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: fake})
	// With affinity each endpoint has a chain of its own.
	web := testkit.Port("ns", "web", 80, "198.18.0.10", testkit.ThreeEndpoints(), testkit.Affinity(time.Minute))
	bare := testkit.Port("ns", "bare", 80, "198.18.0.11")
	read := m.Programmed()
	if got := read(web.Name); len(got.Chains) != 0 || got.Note == "" {
		t.Errorf("before any sync: %+v, want a note and no chains", got)
	}
	mustSync(t, m, testkit.Snapshot(web, bare), full())
	read = m.Programmed()
	got := read(web.Name)
	var names []string
	for _, c := range got.Chains {
		if c.Family != ipfamily.IPv4 || c.Table != "ip kube-proxy" {
			t.Errorf("chain %+v, want IPv4 in ip kube-proxy", c)
		}
		names = append(names, c.Name)
	}
	// The chains must exist in the table the mode wrote.
	dump := fake.Dump()
	for _, n := range names {
		if !strings.Contains(dump, "add chain ip kube-proxy "+n+"\n") {
			t.Errorf("chain %s is not in the table:\n%s", n, dump)
		}
	}
	if svc, eps := count(names, "service-"), count(names, "endpoint-"); svc != 1 || eps != 3 {
		t.Errorf("chains %q: %d service and %d endpoint chains, want 1 and 3", names, svc, eps)
	}
	mustSync(t, m, testkit.Snapshot(bare), &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{web.Name}, Removed: []*servicemap.ServicePort{web}})
	if got := m.Programmed()(web.Name); len(got.Chains) != 0 {
		t.Errorf("after its removal: %+v", got)
	}
}

func count(names []string, prefix string) int {
	n := 0
	for _, s := range names {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// TestProgrammedWhileSyncing reads what was programmed while syncs write
// it; run with -race.
func TestProgrammedWhileSyncing(t *testing.T) {
	m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: fakeFor(ipfamily.IPv4)})
	web := testkit.Port("ns", "web", 80, "198.18.0.10", testkit.ThreeEndpoints())
	mustSync(t, m, testkit.Snapshot(web), full())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = m.Programmed()(web.Name)
			}
		}
	}()
	for i := range 30 {
		cs := &servicemap.ChangeSet{Full: i%5 == 0, Changed: []servicemap.ServicePortName{web.Name}}
		eps := testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("198.19.1."+string(rune('2'+i%3))+":8080"))
		mustSync(t, m, servicemap.NewSnapshot(uint64(i+2), nil, testkit.Port("ns", "web", 80, "198.18.0.10", eps)), cs)
	}
	close(stop)
	wg.Wait()
}
