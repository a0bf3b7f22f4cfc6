package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// The lab of one case in one mode: the topology, the servers on the
// backends, and kproxy on the node fed by a services file.

// Fixed addresses of the lab (see bench/lab): the node's address on the
// client link, and the client's.
const (
	nodeIP   = "198.19.0.1"
	clientIP = "198.19.0.2"
)

// e2eLab is one case's lab, built inside the case's own network namespace.
type e2eLab struct {
	mode     proxyMode
	bin      string // the kproxy binary
	topo     *lab.Topology
	backends []string // the backends' IPv4 addresses, backend-1 first
	manifest string   // the services file kproxy watches
	kproxy   *lab.Process
	// udpResends counts the new-flow UDP asks that sent their datagram
	// again (askUDPNewFlows): each may have taken a round-robin turn.
	udpResends atomic.Int64
}

// startLab builds the lab for mode m with the services file render makes from
// the backends' addresses, and runs kproxy on it with the common flags plus
// extraArgs, waiting for its first sync. It returns nil in the outer test
// process (see lab.InFreshNetns), where the caller must return at once.
func startLab(t *testing.T, m proxyMode, render func(backends []string) string, extraArgs ...string) *e2eLab {
	t.Helper()
	l := newLab(t, m, render)
	if l != nil {
		l.runKproxy(t, nil, extraArgs...)
	}
	return l
}

// newLab is startLab without kproxy, for cases that prepare the node first;
// they call runKproxy. With a nil render there is no services file (kproxy
// will watch an API server).
func newLab(t *testing.T, m proxyMode, render func(backends []string) string) *e2eLab {
	t.Helper()
	var renderLab func(l *e2eLab) string
	if render != nil {
		renderLab = func(l *e2eLab) string { return render(l.backends) }
	}
	return newLabOn(t, m, lab.TopologyOptions{Backends: 3}, renderLab)
}

// newLabOn is newLab on a topology of its own options, with a render that
// sees the whole lab (the backends' IPv6 addresses, for one).
func newLabOn(t *testing.T, m proxyMode, opts lab.TopologyOptions, render func(l *e2eLab) string) *e2eLab {
	t.Helper()
	bin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+bin) {
		return nil
	}
	l := &e2eLab{mode: m, bin: bin}
	l.topo = lab.NewTopology(t, opts)
	quietRedirects(t)
	if legacyIPTables() && !guest.InGuest() {
		// kubelet's mark of the backend it uses: kproxy, as kube-proxy,
		// writes its rules where it finds kube chains.
		l.topo.Node.MustExec("iptables-legacy", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
	}
	// No case fetches the servers' large file: one byte, not the 8 MiB
	// default, written (and hashed) for every lab.
	lab.StartServers(t, l.topo, lab.ServerOptions{NoIperf: true, LargeFileBytes: 1})
	for _, b := range l.topo.Backends {
		l.backends = append(l.backends, b.IPv4.String())
	}
	if render != nil {
		l.manifest = filepath.Join(t.TempDir(), "services.yaml")
		l.write(t, render(l))
	}
	return l
}

// quietRedirects stops the node sending ICMP redirects. In the lab the
// node's default route points back at the client, so a packet for a service
// IP that no rule rewrites leaves by the link it came in on, and the kernel
// tells the client so; that redirect spends the client's ICMP rate-limit
// token, and the port-unreachable of a REJECT rule that follows is dropped,
// turning a refusal into a timeout. A real node's clients do not route
// service IPs through it.
func quietRedirects(t *testing.T) {
	t.Helper()
	for _, link := range []string{"all", "to-client", "br-pods"} {
		path := "/proc/sys/net/ipv4/conf/" + link + "/send_redirects"
		if err := os.WriteFile(path, []byte("0"), 0o644); err != nil {
			t.Fatalf("turning off ICMP redirects on the node: %v", err)
		}
	}
}

// kproxyArgs are the flags every case runs kproxy with in mode m: no
// minimum interval between syncs, so changes land at once, and no conntrack
// table sizing, as nf_conntrack_max cannot be written inside a namespace.
func kproxyArgs(m proxyMode, source string) []string {
	args := []string{source, "--hostname-override=node", "--iptables-min-sync-period=0", "--conntrack-max-per-core=0", "-v=2"}
	if flag := m.proxyModeFlag(); flag != "" {
		args = append(args, "--proxy-mode="+flag)
	}
	return append(args, m.args...)
}

// runKproxy starts kproxy on the services file with env (KEY=value) added
// to its environment and extraArgs after the common flags, and waits for its
// first sync.
func (l *e2eLab) runKproxy(t *testing.T, env []string, extraArgs ...string) {
	t.Helper()
	l.runKproxyOn(t, "--services-file="+l.manifest, env, extraArgs...)
}

// runKproxyOn is runKproxy with another source flag (such as --kubeconfig).
func (l *e2eLab) runKproxyOn(t *testing.T, source string, env []string, extraArgs ...string) {
	t.Helper()
	var wrapper []string
	if len(env) > 0 {
		wrapper = append([]string{"env"}, env...)
	}
	l.startKproxy(t, wrapper, append(kproxyArgs(l.mode, source), extraArgs...))
}

// startKproxy runs kproxy with args on the node, under wrapper (a command
// that execs its arguments, such as env or prlimit, so the process and its
// pid are kproxy's) when it is not empty, and waits for its first sync.
func (l *e2eLab) startKproxy(t *testing.T, wrapper, args []string) {
	t.Helper()
	l.startKproxyWithin(t, firstSyncBound(), wrapper, args)
}

// firstSyncBound is how long kproxy may take to start and finish its first
// sync: setup, not what a case measures. In the guest kernel, whose
// syscalls are about 60 times slower, the start alone (binary, kernel probe)
// takes most of the host's bound, and a busy host slows it further: a
// minute was once not enough there.
func firstSyncBound() time.Duration {
	if guest.InGuest() {
		return 3 * time.Minute
	}
	return lab.SetupBound()
}

// startKproxyWithin is startKproxy waiting up to bound for the first sync,
// for cases whose first sync in the guest kernel takes longer.
func (l *e2eLab) startKproxyWithin(t *testing.T, bound time.Duration, wrapper, args []string) {
	t.Helper()
	if len(wrapper) > 0 {
		l.kproxy = l.topo.Node.Start(wrapper[0], append(append(wrapper[1:], l.bin), args...)...)
	} else {
		l.kproxy = l.topo.Node.Start(l.bin, args...)
	}
	// Registered after kproxy's own cleanup, so it runs first: the state
	// is dumped while kproxy still runs.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node's state when the case failed:\n%s", l.kernelState())
		}
	})
	lab.WaitSyncedWithin(t, bound, l.kproxy, 1)
}

// kernelState dumps the node's IPv4 rules and conntrack table for a failure
// report; a command that fails shows its error in place.
func (l *e2eLab) kernelState() string {
	var b strings.Builder
	cmds := [][]string{{iptablesTool("iptables-save")}, {"conntrack", "-L"}}
	if l.mode.virtualServers {
		cmds = append(cmds, []string{"ipvsadm", "-Ln"}, []string{"ipvsadm", "-Lnc"}, []string{"ipset", "list"}, []string{"ip", "addr", "show", "kube-ipvs0"})
	}
	if l.mode.localPortals {
		cmds = append(cmds, []string{"ip", "route", "show", "table", "local", "proto", "107"}, []string{"ss", "-ltunp"})
	}
	if l.mode.nftablesRules {
		cmds = append(cmds, []string{"nft", "list", "table", "ip", nftTable}, []string{"nft", "list", "table", "ip6", nftTable})
	}
	for _, cmd := range cmds {
		out, err := l.topo.Node.Exec(cmd[0], cmd[1:]...)
		fmt.Fprintf(&b, "$ %s\n%s", strings.Join(cmd, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	return b.String()
}

// write replaces the services file atomically, so kproxy never reads half
// of it.
func (l *e2eLab) write(t *testing.T, content string) {
	t.Helper()
	tmp := l.manifest + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatalf("writing the services file: %v", err)
	}
	if err := os.Rename(tmp, l.manifest); err != nil {
		t.Fatalf("replacing the services file: %v", err)
	}
}

// alive fails t with kproxy's log if kproxy has exited.
func (l *e2eLab) alive(t *testing.T) {
	t.Helper()
	select {
	case <-l.kproxy.Exited():
		t.Fatalf("kproxy exited: %v\n%s", l.kproxy.Err(), l.kproxy.Log())
	default:
	}
}

// natRules is the node's IPv4 nat table as iptables-save prints it, without
// the dated comment lines.
func (l *e2eLab) natRules(t *testing.T) string {
	t.Helper()
	return lab.WithoutComments(l.topo.Node.MustExec(iptablesTool("iptables-save"), "-t", "nat"))
}

// iptablesTool names the iptables command (iptables, ip6tables,
// iptables-save...) of the backend kproxy picks here: the system's default
// on the host, the legacy one where legacyIPTables says so.
func iptablesTool(name string) string {
	if legacyIPTables() {
		return strings.Replace(name, "tables", "tables-legacy", 1)
	}
	return name
}

// programs says whether kproxy has programmed the service address vip, with
// the node's state as the detail: its nat table, its IPVS virtual servers in
// the IPVS mode, its local routes with local portals, or its nftables table
// of vip's family in the nftables mode.
func (l *e2eLab) programs(t *testing.T, vip string) (bool, string) {
	t.Helper()
	if l.mode.nftablesRules {
		family := "ip"
		if strings.Contains(vip, ":") {
			family = "ip6"
		}
		table, err := l.nftTable(family)
		if err != nil {
			return false, err.Error()
		}
		return mentionsAddress(table, vip), table
	}
	if l.mode.localPortals {
		routes := l.topo.Node.MustExec("ip", "route", "show", "table", "local", "proto", "107")
		return strings.Contains(routes, "local "+vip+" "), routes
	}
	if l.mode.virtualServers {
		state := l.topo.Node.MustExec("ipvsadm", "-Ln")
		return strings.Contains(state, " "+vip+":"), state
	}
	save := l.natRules(t)
	return strings.Contains(save, vip+"/32"), save
}

// programmedState is what kproxy programmed on the node, to compare over
// time: its local routes, its IPVS virtual servers or the nat table
// without the chain counters, which count traffic.
func (l *e2eLab) programmedState(t *testing.T) string {
	t.Helper()
	if l.mode.localPortals {
		return l.topo.Node.MustExec("ip", "route", "show", "table", "local", "proto", "107")
	}
	if l.mode.virtualServers {
		return l.topo.Node.MustExec("ipvsadm", "-Ln")
	}
	if l.mode.nftablesRules {
		var b strings.Builder
		for _, family := range []string{"ip", "ip6"} {
			table, err := l.nftTable(family)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(table)
		}
		return b.String()
	}
	// The [packets:bytes] ending iptables-save's chain lines: legacy
	// iptables prints real ones for built-in chains.
	chainCounters := regexp.MustCompile(`(?m) \[[0-9]+:[0-9]+\]$`)
	return chainCounters.ReplaceAllString(l.natRules(t), "")
}

// isBackend says whether an answer names one of the lab's backends.
func (l *e2eLab) isBackend(name string) bool {
	for _, b := range l.topo.Backends {
		if b.Name == name {
			return true
		}
	}
	return false
}

// backendIndex returns the named backend's index in l.backends, -1 if none.
func (l *e2eLab) backendIndex(name string) int {
	for i, b := range l.topo.Backends {
		if b.Name == name {
			return i
		}
	}
	return -1
}

// backendsExcept returns the backends' addresses without the named ones'.
func (l *e2eLab) backendsExcept(names ...string) []string {
	var out []string
	for i, ip := range l.backends {
		if !slices.Contains(names, l.topo.Backends[i].Name) {
			out = append(out, ip)
		}
	}
	return out
}

// nftTable is the table kube-proxy's nftables mode (and kproxy's) writes,
// in the ip and ip6 families.
const nftTable = "kube-proxy"

// nftTable lists kproxy's nftables table of family ("ip" or "ip6") on the
// node, normalised (see normalizeNFT); an error names the command.
//
// The table is read until two listings in a row agree. A listing that
// overlapped kproxy's transactions (failing ones included) under load once
// printed some chains' rules several times, a foreign chain kproxy never
// writes among them; a table that really changed reads the same twice.
func (l *e2eLab) nftTable(family string) (string, error) {
	list := func() (string, error) {
		out, err := l.topo.Node.Exec("nft", "list", "table", family, nftTable)
		if err != nil {
			return "", fmt.Errorf("nft list table %s %s: %w\n%s", family, nftTable, err, out)
		}
		return normalizeNFT(out), nil
	}
	last, err := list()
	for range 5 {
		if err != nil {
			return "", err
		}
		var next string
		if next, err = list(); err == nil && next == last {
			return next, nil
		}
		last = next
	}
	return last, err
}

// normalizeNFT drops from nft's listing what changes without kproxy doing
// anything: rule counters, which count traffic, and the time left to the
// elements of dynamic sets (ClientIP affinity).
func normalizeNFT(listing string) string {
	listing = regexp.MustCompile(`counter packets \d+ bytes \d+`).ReplaceAllString(listing, "counter")
	return regexp.MustCompile(` expires [0-9dhms]+`).ReplaceAllString(listing, "")
}

// mentionsAddress says whether text holds the address addr as a whole
// address (198.18.0.10 is not in 198.18.0.100).
func mentionsAddress(text, addr string) bool {
	return regexp.MustCompile(`(^|[^0-9a-f.:])` + regexp.QuoteMeta(addr) + `($|[^0-9a-f.:])`).MatchString(text)
}
