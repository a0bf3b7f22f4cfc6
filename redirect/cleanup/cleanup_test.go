package cleanup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/ipvs"
	"github.com/vishvananda/netlink/nl"

	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/localroute/fakeroutes"
	"kproxy.dev/kproxy/redirect/modes/iptables"
	ipvsmode "kproxy.dev/kproxy/redirect/modes/ipvs"
	"kproxy.dev/kproxy/redirect/modes/userspace"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
)

type fakeRunner struct {
	outputs map[string]string // command line → stdout
	fail    map[string]error  // command line prefix → error
	calls   []string
	stdin   map[string]string // command line → last stdin
}

func (r *fakeRunner) Run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	r.calls = append(r.calls, line)
	if r.stdin == nil {
		r.stdin = map[string]string{}
	}
	if stdin != nil {
		r.stdin[line] += string(stdin)
	}
	for prefix, err := range r.fail {
		if strings.HasPrefix(line, prefix) && (stdin == nil || strings.Contains(string(stdin), "*nat")) {
			return nil, err
		}
	}
	return []byte(r.outputs[line]), nil
}

func (r *fakeRunner) ran(line string) bool {
	for _, c := range r.calls {
		if c == line {
			return true
		}
	}
	return false
}

type fakeLinks struct{ links map[string]bool }

func (l *fakeLinks) LinkExists(name string) (bool, error) { return l.links[name], nil }
func (l *fakeLinks) DeleteLink(name string) error {
	if !l.links[name] {
		return fmt.Errorf("link %s not found", name)
	}
	delete(l.links, name)
	return nil
}

type fakeIPVS struct {
	services []*ipvs.Service
	failDel  error
	closed   bool
}

func (f *fakeIPVS) GetServices() ([]*ipvs.Service, error) { return f.services, nil }
func (f *fakeIPVS) DelService(s *ipvs.Service) error {
	if f.failDel != nil {
		return f.failDel
	}
	for i, x := range f.services {
		if x == s {
			f.services = append(f.services[:i], f.services[i+1:]...)
			return nil
		}
	}
	return syscall.ESRCH
}
func (f *fakeIPVS) Close() { f.closed = true }

// fakeIPSets fails like ip_set over netlink: a set a rule still uses is
// busy; destroying a missing set is no error (the request carries no
// NLM_F_EXCL).
type fakeIPSets struct {
	sets      []string
	busy      map[string]bool
	destroyed []string
	listed    bool
}

func (f *fakeIPSets) Names() ([]string, error) {
	f.listed = true
	return slices.Clone(f.sets), nil
}
func (f *fakeIPSets) Destroy(name string) error {
	if f.busy[name] {
		return ipsetError(syscall.Errno(nl.IPSET_ERR_BUSY))
	}
	if i := slices.Index(f.sets, name); i >= 0 {
		f.sets = slices.Delete(f.sets, i, i+1)
		f.destroyed = append(f.destroyed, name)
	}
	return nil
}

// fakeNFTables fails like nf_tables: deleting a missing table is ENOENT.
type fakeNFTables struct {
	tables  []NFTable
	stale   []NFTable // when set, what Tables lists (tables removed since)
	listErr error
	deleted []NFTable
}

func (f *fakeNFTables) Tables() ([]NFTable, error) {
	if f.stale != nil {
		return slices.Clone(f.stale), f.listErr
	}
	return slices.Clone(f.tables), f.listErr
}
func (f *fakeNFTables) DeleteTable(t NFTable) error {
	for i, x := range f.tables {
		if x == t {
			f.tables = append(f.tables[:i], f.tables[i+1:]...)
			f.deleted = append(f.deleted, t)
			return nil
		}
	}
	return fmt.Errorf("deleting nftables table %s: %w", t, syscall.ENOENT)
}

func allFeatures() kernel.Features {
	full := kernel.IPTables{Usable: true, DNAT: true, Redirect: true}
	return kernel.Features{
		IPv4:    kernel.FamilyIPTables{NFT: full, Legacy: full},
		IPv6:    kernel.FamilyIPTables{NFT: full},
		Backend: kernel.NFT,
		IPVS:    kernel.Support{Present: true},
		IPSet:   kernel.Support{Present: true},
	}
}

// nodeSets are the ipsets on the fake node: ipvs mode's, the probe's and a
// user's.
func nodeSets() []string {
	return []string{"KUBE-CLUSTER-IP", "user-allow", "KUBE-6-LOOP-BACK", "KPROXY-PROBE"}
}

// nodeTables are the nftables tables on the fake node: kube-proxy's two,
// an iptables-nft table and users' tables, one named kube-proxy in inet.
func nodeTables() []NFTable {
	return []NFTable{{"ip", "nat"}, {"ip", "kube-proxy"}, {"ip6", "kube-proxy"}, {"inet", "kube-proxy"}, {"ip", "user"}}
}

// fakes are a Cleaner's kernel surfaces, faked.
type fakes struct {
	runner   *fakeRunner
	links    *fakeLinks
	ipvs     *fakeIPVS
	ipsets   *fakeIPSets
	nftables *fakeNFTables
	routes   *fakeroutes.Routes
}

func newFakes(save string) (*Cleaner, fakes) {
	r := &fakeRunner{outputs: map[string]string{
		"iptables-nft-save":    save,
		"iptables-legacy-save": "",
		"ip6tables-nft-save":   "",
	}}
	l := &fakeLinks{links: map[string]bool{"kube-ipvs0": true, "eth0": true}}
	v := &fakeIPVS{services: []*ipvs.Service{
		{Address: net.ParseIP("198.18.0.10"), Protocol: syscall.IPPROTO_TCP, Port: 80},
		{FWMark: 7},
	}}
	routes := fakeroutes.New(netip.MustParseAddr("198.19.0.1"))
	for _, vip := range []string{"198.18.0.10", "fd00:18::10"} {
		_ = routes.Add(netip.MustParseAddr(vip)) // the userspace mode's local portals
	}
	f := fakes{runner: r, links: l, ipvs: v, ipsets: &fakeIPSets{sets: nodeSets()}, nftables: &fakeNFTables{tables: nodeTables()}, routes: routes}
	c := &Cleaner{Runner: r, Links: l, IPSets: f.ipsets, NFTables: f.nftables, Routes: routes, OpenIPVS: func() (IPVS, error) { return v, nil }}
	return c, f
}

func TestCleanerAll(t *testing.T) {
	c, f := newFakes(fixture(t, "iptables-mode.save"))
	r, l, v, n := f.runner, f.links, f.ipvs, f.nftables
	if err := c.Clean(context.Background(), allFeatures(), keeping("")); err != nil {
		t.Fatalf("All: %v", err)
	}
	if len(v.services) != 0 || !v.closed {
		t.Errorf("IPVS services left %v (closed=%t)", v.services, v.closed)
	}
	if l.links["kube-ipvs0"] || !l.links["eth0"] {
		t.Errorf("links after cleanup: %v, want only eth0", l.links)
	}
	plans, _ := Plan(fixture(t, "iptables-mode.save"), keeping(""))
	var want strings.Builder
	for _, p := range plans {
		want.WriteString(p.Input)
	}
	if got := r.stdin["iptables-nft-restore -w 5 --noflush"]; got != want.String() {
		t.Errorf("restore input:\n%s\nwant:\n%s", got, want.String())
	}
	if want := []string{"KUBE-CLUSTER-IP", "KUBE-6-LOOP-BACK", "KPROXY-PROBE"}; !slices.Equal(f.ipsets.destroyed, want) {
		t.Errorf("destroyed ipsets %v, want %v (user-allow stays)", f.ipsets.destroyed, want)
	}
	if want := []NFTable{{"ip", "kube-proxy"}, {"ip6", "kube-proxy"}}; !slices.Equal(n.deleted, want) {
		t.Errorf("deleted nftables tables %v, want %v (kube-proxy's only)", n.deleted, want)
	}
	if left := f.routes.Ours(); len(left) != 0 {
		t.Errorf("local routes left: %v", left)
	}
	for _, line := range []string{"iptables-legacy-restore -w 5 --noflush", "ip6tables-legacy-save"} {
		if r.ran(line) {
			t.Errorf("ran %q, which must be left alone or is unusable", line)
		}
	}
}

// TestCleanerLeavesIPSetAloneWhenNotLoaded: without ip_set loaded no mode
// left a set, and asking for the list would load the module.
func TestCleanerLeavesIPSetAloneWhenNotLoaded(t *testing.T) {
	c, f := newFakes(fixture(t, "iptables-mode.save"))
	features := allFeatures()
	features.IPSet = kernel.Support{Detail: "not loaded"}
	if err := c.Clean(context.Background(), features, keeping("")); err != nil {
		t.Fatalf("Clean: %v", err)
	}
	if f.ipsets.listed {
		t.Error("cleanup listed the ipsets of a kernel without ip_set loaded")
	}
}

func TestCleanerExceptIPVSKeepsIPVS(t *testing.T) {
	c, f := newFakes(fixture(t, "ipvs-mode.save"))
	r, l, v := f.runner, f.links, f.ipvs
	if err := c.Clean(context.Background(), allFeatures(), keeping(mode.IPVS)); err != nil {
		t.Fatalf("Except(ipvs): %v", err)
	}
	if len(v.services) != 2 || !l.links["kube-ipvs0"] {
		t.Errorf("ipvs mode's services or link removed: services=%v links=%v", v.services, l.links)
	}
	for _, call := range r.calls {
		if strings.HasPrefix(call, "iptables-nft-restore") {
			t.Errorf("ran %q while keeping ipvs mode", call)
		}
	}
	if want := []string{"KPROXY-PROBE"}; !slices.Equal(f.ipsets.destroyed, want) {
		t.Errorf("destroyed ipsets %v while keeping ipvs mode, want only the probe's %v", f.ipsets.destroyed, want)
	}
	if left := f.routes.Ours(); len(left) != 0 {
		t.Errorf("the userspace mode's local routes stay when the ipvs mode is kept: %v", left)
	}
}

func TestCleanerKeepingUserspaceKeepsItsLocalRoutes(t *testing.T) {
	c, f := newFakes(fixture(t, "iptables-mode.save"))
	if err := c.Clean(context.Background(), allFeatures(), keeping(mode.Userspace)); err != nil {
		t.Fatal(err)
	}
	if got := f.routes.Ours(); len(got) != 2 {
		t.Errorf("local routes while keeping the userspace mode = %v, want both", got)
	}
}

func TestCleanerLeavesForeignIPVSAlone(t *testing.T) {
	c, f := newFakes("")
	l, v := f.links, f.ipvs
	delete(l.links, "kube-ipvs0")
	if err := c.Clean(context.Background(), allFeatures(), keeping("")); err != nil {
		t.Fatalf("All: %v", err)
	}
	if len(v.services) != 2 {
		t.Errorf("IPVS services deleted without kube-ipvs0 evidence: %v", v.services)
	}
}

func TestCleanerCarriesOnAndNamesFailures(t *testing.T) {
	c, f := newFakes(fixture(t, "iptables-mode.save"))
	r, v, n := f.runner, f.ipvs, f.nftables
	v.failDel = syscall.EPERM
	f.ipsets.busy = map[string]bool{"KUBE-CLUSTER-IP": true}
	// Someone deleted one of kube-proxy's tables after cleanup listed them.
	n.stale, n.tables = n.tables, []NFTable{{"ip6", "kube-proxy"}}
	r.fail = map[string]error{
		"iptables-nft-restore": &kernel.CommandError{Command: "iptables-nft-restore", ExitCode: 1, Stderr: "iptables-nft-restore: line 14 failed", Err: errors.New("exit status 1")},
	}
	err := c.Clean(context.Background(), allFeatures(), keeping(""))
	if err == nil {
		t.Fatal("All succeeded despite failures")
	}
	for _, s := range []string{
		"deleting IPVS service 198.18.0.10:80/6", "deleting IPVS service fwmark 7", "operation not permitted",
		"cleaning table nat with iptables-nft-restore", "line 14 failed",
		"destroying ipset KUBE-CLUSTER-IP: busy: the set is in use by a kernel component",
		"deleting nftables table ip kube-proxy: no such file or directory",
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
	// Later steps still ran: filter/mangle restores, the other sets.
	if !strings.Contains(r.stdin["iptables-nft-restore -w 5 --noflush"], "*filter") {
		t.Errorf("filter table not cleaned after nat failed")
	}
	if !slices.Contains(f.ipsets.destroyed, "KUBE-6-LOOP-BACK") {
		t.Errorf("later ipsets not destroyed after one failed")
	}
}

// TestCleanerLegacyBackend: cleanup reads the legacy backend whenever Detect
// found it usable or left it unprobed (reading creates no table), restores
// only the tables its save shows, and leaves a legacy backend alone whose
// save itself fails.
func TestCleanerLegacyBackend(t *testing.T) {
	notProbed := kernel.IPTables{NotProbed: true, Problem: kernel.LegacyNotProbed}
	cases := []struct {
		name       string
		legacy     kernel.IPTables // IPv4 and IPv6
		legacySave string          // what iptables-legacy-save prints now
		wantSave   bool            // legacy save commands run
		wantClean  bool            // iptables-legacy-restore runs the plan
	}{
		{name: "not probed, no legacy tables", legacy: notProbed, legacySave: "", wantSave: true},
		{name: "not probed, leftovers appeared since Detect", legacy: notProbed, legacySave: fixture(t, "userspace-mode.save"), wantSave: true, wantClean: true},
		{name: "probed because legacy tables were present", legacy: kernel.IPTables{Usable: true, DNAT: true, Redirect: true}, legacySave: fixture(t, "userspace-mode.save"), wantSave: true, wantClean: true},
		{name: "legacy not installed", legacy: kernel.IPTables{Problem: "listing rules: iptables-legacy-save: not installed"}, legacySave: fixture(t, "userspace-mode.save")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl, fk := newFakes("")
			r := fk.runner
			r.outputs["iptables-legacy-save"] = c.legacySave
			f := allFeatures()
			f.IPv4.Legacy, f.IPv6.Legacy = c.legacy, c.legacy
			if err := cl.Clean(context.Background(), f, keeping("")); err != nil {
				t.Fatalf("All: %v", err)
			}
			for _, cmd := range []string{"iptables-legacy-save", "ip6tables-legacy-save"} {
				if r.ran(cmd) != c.wantSave {
					t.Errorf("ran %s = %t, want %t", cmd, r.ran(cmd), c.wantSave)
				}
			}
			got := r.stdin["iptables-legacy-restore -w 5 --noflush"]
			if !c.wantClean {
				if got != "" {
					t.Errorf("restored into legacy with nothing to clean:\n%s", got)
				}
				return
			}
			plans, err := Plan(c.legacySave, keeping(""))
			if err != nil {
				t.Fatal(err)
			}
			var want strings.Builder
			for _, p := range plans {
				want.WriteString(p.Input)
			}
			if want.Len() == 0 || got != want.String() {
				t.Errorf("legacy restore input:\n%s\nwant:\n%s", got, want.String())
			}
			if r.ran("ip6tables-legacy-restore -w 5 --noflush") {
				t.Errorf("restored into ip6tables-legacy, whose save showed no tables")
			}
		})
	}
}

// TestCleanerOnlyReadsWhenNothingToClean: on a node without leftovers, be it
// fresh (no tables at all) or holding only kubelet's and users' chains,
// cleanup only reads: no iptables-restore (which would register empty nat
// and filter tables in a backend that has none), no destroy, no delete.
func TestCleanerOnlyReadsWhenNothingToClean(t *testing.T) {
	notProbed := kernel.IPTables{NotProbed: true, Problem: kernel.LegacyNotProbed}
	cases := []struct {
		name string
		save string // every backend's and family's iptables-save
	}{
		{name: "fresh namespace, no tables", save: ""},
		{name: "only kubelet's chains", save: fixture(t, "kubelet-only.save")},
		{name: "kubelet's and users' chains", save: fixture(t, "kept-v4.save")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl, fk := newFakes(c.save)
			r, l, n, sets := fk.runner, fk.links, fk.nftables, fk.ipsets
			for _, s := range []string{"iptables-legacy-save", "ip6tables-nft-save", "ip6tables-legacy-save"} {
				r.outputs[s] = c.save
			}
			sets.sets = []string{"user-allow"}
			n.tables = []NFTable{{"ip", "user"}, {"inet", "kube-proxy"}}
			delete(l.links, "kube-ipvs0")
			opened := false
			cl.OpenIPVS = func() (IPVS, error) { opened = true; return &fakeIPVS{}, nil }
			f := allFeatures()
			f.IPv6.Legacy, f.IPv4.Legacy = notProbed, notProbed
			if err := cl.Clean(context.Background(), f, keeping("")); err != nil {
				t.Fatalf("All: %v", err)
			}
			reads := map[string]bool{}
			for _, fam := range ipfamily.All() {
				for _, b := range kernel.Backends() {
					reads[b.SaveCommand(fam)] = true
				}
			}
			for _, call := range r.calls {
				if !reads[call] {
					t.Errorf("ran %q on a node with nothing to clean", call)
				}
			}
			for cmd := range reads {
				if !r.ran(cmd) {
					t.Errorf("did not read %q: leftovers there would survive", cmd)
				}
			}
			if len(r.stdin) != 0 || opened || len(l.links) != 1 || len(n.deleted) != 0 || len(sets.destroyed) != 0 {
				t.Errorf("changed the node: restores %v, IPVS opened %t, links %v, nftables tables deleted %v, ipsets destroyed %v", r.stdin, opened, l.links, n.deleted, sets.destroyed)
			}
		})
	}
}

// keeping is the scope of a node running keep ("" for --cleanup): the real
// modes' objects, as the registry (redirect/modes) composes them.
func keeping(keep mode.Name) Scope {
	all := map[mode.Name]owned.Objects{
		mode.IPTables: iptables.Owned(), mode.IPVS: ipvsmode.Owned(), mode.Userspace: userspace.Owned(),
	}
	scope := Scope{Remove: []owned.Objects{KubeProxyOnly()}}
	for name, o := range all {
		if name == keep {
			scope.Keep = o
		} else {
			scope.Remove = append(scope.Remove, o)
		}
	}
	return scope
}
