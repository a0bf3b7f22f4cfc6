package ipvs

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/fakeipvs"
	"kproxy.dev/kproxy/sync/servicemap"
)

func web() *servicemap.ServicePort {
	sp := svc("web", v1.ProtocolTCP, "198.18.0.10", 80, "198.19.1.11:8080", "198.19.1.12:8080")
	sp.NodePort = 30080
	return sp
}

func dns(eps ...string) *servicemap.ServicePort {
	if eps == nil {
		eps = []string{"198.19.1.11:53", "198.19.1.12:53"}
	}
	return svc("dns", v1.ProtocolUDP, "198.18.0.53", 53, eps...)
}

// kernelText renders everything the fakes hold, for the golden file.
func (g *rig) kernelText() string {
	var sb strings.Builder
	sb.WriteString(fakeipvs.Dump(g.ipvs, g.link, g.sets))
	sb.WriteString("# iptables-save\n")
	sb.WriteString(g.ipt.Save(""))
	sb.WriteString("# sysctls\n")
	values := g.sysctls.Values()
	for _, name := range slices.Sorted(maps.Keys(values)) {
		sb.WriteString(name + "=" + values[name] + "\n")
	}
	return sb.String()
}

func TestFirstSyncFromAnEmptyKernel(t *testing.T) {
	g := newRig(t, -1)
	g.mustSync(t, web(), dns())
	g.expectKernel(t, web(), dns())

	testkit.Golden(t, filepath.Join("testdata", "first-sync.golden"), g.kernelText())

	// Two cluster IPs, plus the NodePort on each of the two node addresses.
	for name, want := range map[string]float64{"kproxy_ipvs_virtual_servers": 3, "kproxy_ipvs_real_servers": 6} {
		if v := g.value(t, name, "ip_family", "IPv4"); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := g.value(t, "kubeproxy_sync_proxy_rules_iptables_total", "table", "nat", "ip_family", "IPv4"); v == 0 {
		t.Error("kubeproxy_sync_proxy_rules_iptables_total{table=nat} is 0 after writing the layer")
	}
}

func TestUnchangedSyncWritesNothing(t *testing.T) {
	g := newRig(t, -1)
	g.mustSync(t, web(), dns())
	restores := len(g.ipt.Restores())
	g.resetLog()
	g.mustSync(t, web(), dns())
	if ops := g.ops(); len(ops) != 0 {
		t.Errorf("a sync of the same services made IPVS operations: %v", ops)
	}
	if n := len(g.ipt.Restores()); n != restores {
		t.Errorf("a sync of the same services ran %d restores, want none", n-restores)
	}

	// A full sync re-reads IPVS and rewrites the layer and the sysctls,
	// repairing what others changed (and only that: a sysctl already
	// right is not written, as kube-proxy's EnsureSysctl reads first).
	if err := g.sysctls.Write("net/ipv4/ip_forward", "0"); err != nil {
		t.Fatal(err)
	}
	before := g.sysctls.WritesOf("net/ipv4/ip_forward")
	unchanged := g.sysctls.WritesOf("net/ipv4/vs/conntrack")
	if err := g.m.Sync(context.Background(), snapshot(web(), dns()), &servicemap.ChangeSet{Full: true}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(g.ops(), "GetServices") {
		t.Errorf("a full sync did not re-read IPVS: %v", g.ops())
	}
	if n := len(g.ipt.Restores()); n != restores+1 {
		t.Errorf("a full sync ran %d restores, want 1", n-restores)
	}
	if g.sysctls.WritesOf("net/ipv4/ip_forward") != before+1 {
		t.Error("a full sync did not repair net/ipv4/ip_forward")
	}
	if g.sysctls.WritesOf("net/ipv4/vs/conntrack") != unchanged {
		t.Error("a full sync rewrote net/ipv4/vs/conntrack, which was right")
	}
}

func TestOneEndpointChange(t *testing.T) {
	g := newRig(t, -1)
	g.mustSync(t, web(), dns())
	restores := len(g.ipt.Restores())
	g.resetLog()
	changed := dns("198.19.1.12:53", "198.19.1.13:53")
	g.mustSync(t, web(), changed)

	want := []string{
		"NewDestination UDP/198.18.0.53:53 -> 198.19.1.13:53",
		"DelDestination UDP/198.18.0.53:53 -> 198.19.1.11:53",
	}
	if got := g.ops(); !slices.Equal(got, want) {
		t.Errorf("operations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := len(g.ipt.Restores()); n != restores {
		t.Errorf("an endpoint change ran %d restores; the iptables layer did not change", n-restores)
	}
	g.expectKernel(t, web(), changed)
}

func TestServiceDeleted(t *testing.T) {
	g := newRig(t, -1)
	g.mustSync(t, web(), dns())
	g.resetLog()
	g.mustSync(t, web())

	ops := g.ops()
	for _, want := range []string{"DelAddr 198.18.0.53", "DelService UDP/198.18.0.53:53",
		"Del KUBE-CLUSTER-IP", "Del KUBE-IPVS-IPS"} {
		if !slices.ContainsFunc(ops, func(op string) bool { return strings.HasPrefix(op, want) }) {
			t.Errorf("no %q among the operations:\n%s", want, strings.Join(ops, "\n"))
		}
	}
	// The address goes before its virtual server, so nothing reaches a
	// half-removed service.
	if slices.Index(ops, "DelAddr 198.18.0.53") > slices.Index(ops, "DelService UDP/198.18.0.53:53") {
		t.Errorf("the virtual server was deleted before its address was unbound:\n%s", strings.Join(ops, "\n"))
	}
	g.expectKernel(t, web())
	if v := g.value(t, "kproxy_ipvs_virtual_servers", "ip_family", "IPv4"); v != 2 {
		t.Errorf("kproxy_ipvs_virtual_servers = %v after the deletion, want 2", v)
	}
}

func TestIPVSFailureNamesTheVirtualServerAndTheNextSyncConverges(t *testing.T) {
	g := newRig(t, -1)
	g.setHook(func(op, target string) error {
		if op == "NewService" && target == "UDP/198.18.0.53:53" {
			return syscall.ENOMEM
		}
		return nil
	})
	err := g.sync(web(), dns())
	if err == nil {
		t.Fatal("Sync succeeded though creating a virtual server failed")
	}
	for _, want := range []string{"IPv4", "UDP/198.18.0.53:53", "cannot allocate memory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("error %v does not wrap the kernel's", err)
	}
	if v := g.value(t, "kproxy_ipvs_reconcile_failures_total", "ip_family", "IPv4"); v != 1 {
		t.Errorf("kproxy_ipvs_reconcile_failures_total = %v, want 1", v)
	}
	// The other virtual servers and the iptables layer are in place.
	if !g.ipt.HasChain("nat", desired.ChainServices) {
		t.Error("the iptables layer was not written because one virtual server failed")
	}

	g.setHook(nil)
	g.mustSync(t, web(), dns())
	g.expectKernel(t, web(), dns())
}

func TestRestoreFailureIsRetried(t *testing.T) {
	g := newRig(t, -1)
	g.ipt.FailNextRestore("iptables-nft-restore: line 2 failed: Resource temporarily unavailable.\n")
	err := g.sync(web())
	if err == nil || !strings.Contains(err.Error(), "IPv4") || !strings.Contains(err.Error(), "restoring the iptables layer") {
		t.Fatalf("Sync = %v, want an IPv4 restore failure", err)
	}
	if v := g.value(t, "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"); v != 1 {
		t.Errorf("restore failures = %v, want 1", v)
	}
	if g.ipt.HasChain("nat", desired.ChainServices) {
		t.Error("a failed restore left chains behind")
	}
	// Same services, not a full sync: the layer is written anyway, as the
	// last attempt failed.
	g.mustSync(t, web())
	g.expectKernel(t, web())
	if got := g.ipt.Rules("nat", "PREROUTING"); len(got) != 1 || !strings.HasSuffix(got[0], "-j "+desired.ChainServices) {
		t.Errorf("nat/PREROUTING = %v, want the jump to %s", got, desired.ChainServices)
	}
}

func TestSysctlFailures(t *testing.T) {
	tests := []struct {
		name    string
		sysctl  string
		wantErr bool
	}{
		{"an optional one is a warning", "net/ipv4/vs/expire_nodest_conn", false},
		{"ip_forward is needed", "net/ipv4/ip_forward", true},
		{"IPVS conntrack is needed", "net/ipv4/vs/conntrack", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t, -1)
			g.sysctls.FailWrites(tt.sysctl, syscall.EROFS)
			err := g.sync(web())
			if (err != nil) != tt.wantErr {
				t.Fatalf("Sync = %v, want an error: %v", err, tt.wantErr)
			}
			if tt.wantErr && !strings.Contains(err.Error(), tt.sysctl) {
				t.Errorf("error %q does not name %s", err, tt.sysctl)
			}
			// The rest was programmed all the same.
			g.expectKernel(t, web())

			g.sysctls.FailWrites(tt.sysctl, 0)
			before := g.sysctls.WritesOf(tt.sysctl)
			g.mustSync(t, web())
			retried := g.sysctls.WritesOf(tt.sysctl) > before
			if retried != tt.wantErr {
				t.Errorf("next sync rewrote %s: %v, want %v (required ones are retried, others wait for a full sync)",
					tt.sysctl, retried, tt.wantErr)
			}
			if other := "net/ipv4/vs/expire_quiescent_template"; g.sysctls.WritesOf(other) != 1 {
				t.Errorf("%s written %d times, want once", other, g.sysctls.WritesOf(other))
			}
		})
	}
}

func TestDrainDeletesIdleRealServers(t *testing.T) {
	g := newRig(t, -1)
	both := svc("web", v1.ProtocolTCP, "198.18.0.10", 80, "198.19.1.11:8080", "198.19.1.12:8080")
	g.mustSync(t, both)
	key := desired.Key{Addr: mustAddr("198.18.0.10"), Protocol: v1.ProtocolTCP, Port: 80}
	old := mustAddrPort("198.19.1.11:8080")
	if err := g.ipvs.SetConnections(key, old, 2, 0); err != nil {
		t.Fatal(err)
	}
	fewer := svc("web", v1.ProtocolTCP, "198.18.0.10", 80, "198.19.1.12:8080")
	g.mustSync(t, fewer)
	if v := g.value(t, "kproxy_ipvs_real_servers_draining", "ip_family", "IPv4"); v != 1 {
		t.Fatalf("draining = %v, want 1 (a TCP real server with connections)", v)
	}
	g.resetLog()
	if err := g.m.Drain(); err != nil {
		t.Fatal(err)
	}
	if got := g.writes(); len(got) != 0 {
		t.Fatalf("a drain pass while the real server still had connections did %v", got)
	}
	if err := g.ipvs.SetConnections(key, old, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := g.m.Drain(); err != nil {
		t.Fatal(err)
	}
	if got, want := g.writes(), []string{"DelDestination TCP/198.18.0.10:80 -> 198.19.1.11:8080"}; !slices.Equal(got, want) {
		t.Errorf("the drain pass once the connections ended did %v, want %v", got, want)
	}
	g.expectKernel(t, fewer)
}

func TestCloseStopsTheBackgroundDrain(t *testing.T) {
	g := newRig(t, 5*time.Millisecond)
	g.mustSync(t, web())
	key := desired.Key{Addr: mustAddr("198.18.0.10"), Protocol: v1.ProtocolTCP, Port: 80}
	if err := g.ipvs.SetConnections(key, mustAddrPort("198.19.1.11:8080"), 1, 0); err != nil {
		t.Fatal(err)
	}
	fewer := svc("web", v1.ProtocolTCP, "198.18.0.10", 80, "198.19.1.12:8080")
	g.mustSync(t, fewer)

	reads := func() int { return g.ipvs.Ops()["GetDestinations"] }
	start := reads()
	deadline := time.Now().Add(5 * time.Second)
	for reads() < start+2 {
		if time.Now().After(deadline) {
			t.Fatal("the background drain never checked the draining real server")
		}
		time.Sleep(time.Millisecond)
	}
	if err := g.m.Close(); err != nil {
		t.Fatal(err)
	}
	after := reads()
	time.Sleep(30 * time.Millisecond)
	if n := reads(); n != after {
		t.Errorf("the drain ran %d more times after Close", n-after)
	}
	if err := g.m.Close(); err != nil {
		t.Errorf("a second Close = %v", err)
	}
}
