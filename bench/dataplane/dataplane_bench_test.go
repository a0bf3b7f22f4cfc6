package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/fdbudget"
	"kproxy.dev/kproxy/redirect/sklookup"
)

// relayProcessArg makes the test binary run the reference relay instead of
// tests (see TestMain): the relay gets a process of its own, so its RSS and
// CPU are measured like HAProxy's and kproxy's, apart from the benchmark's.
const relayProcessArg = "dataplane-reference-relay"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == relayProcessArg {
		if err := runRelayProcess(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "reference relay: %v\n", err)
		}
		// Returning without m.Run exits 0; the benchmark notices a relay
		// that stopped on its own by its exit, with this log.
		return
	}
	if len(os.Args) > 1 && os.Args[1] == udpFlowsArg {
		if err := runUDPFlowsProcess(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "new UDP flows: %v\n", err)
			os.Exit(1)
		}
		return
	}
	m.Run()
}

func runRelayProcess(args []string) error {
	var specs []RelaySpec
	for _, a := range args {
		s, err := ParseRelaySpec(a)
		if err != nil {
			return err
		}
		specs = append(specs, s)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	r, err := StartCopyRelay(specs)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "reference relay listening on %v\n", r.Addrs())
	return r.Run(ctx)
}

// Benchmark settings: the whole table must finish within about 4 minutes.
const (
	runSeconds  = 5               // each iperf3 and wrk run
	udpDuration = 4 * time.Second // each UDP request/response run
	udpFlows    = 16
	udpPayload  = 64
	wrkConns    = 32
	wrkThreads  = 2
	// wantIdleConns is the idle-connection count. Each proxied
	// connection costs the proxy two descriptors, so it needs
	// RLIMIT_NOFILE above 20,000; where the hard limit is lower and cannot
	// be raised (no CAP_SYS_RESOURCE, as in some containers) the row uses
	// as many as fit and says so.
	wantIdleConns = 10000
	// noFileLimit is the RLIMIT_NOFILE (soft and hard) the benchmark
	// process asks for; every proxy it starts inherits it.
	noFileLimit = 200000
	// fdHeadroom is what a proxy needs besides its connections: listeners,
	// epoll, log, metrics server, pipes.
	fdHeadroom = 256
)

// Service ports, the same on every VIP.
const (
	iperfPort = lab.IperfPort
	httpPort  = lab.NginxPort
	udpPort   = lab.UDPPlainEchoPort
)

// The VIPs, one per path, and the fixed proxy ports of the reference relay
// and HAProxy (below the ephemeral range this benchmark sets, so kproxy's
// kernel-chosen ports cannot collide with them).
var (
	dnatVIP    = netip.MustParseAddr("198.18.1.1")
	kproxyVIP  = netip.MustParseAddr("198.18.2.1")
	iocopyVIP  = netip.MustParseAddr("198.18.3.1")
	haproxyVIP = netip.MustParseAddr("198.18.4.1")
	// kproxyLocalVIP is the local-portal kproxy's, past the extra
	// proxies' 198.18.5-8.1, and kproxySKLookupVIP the socket-lookup one's.
	kproxyLocalVIP    = netip.MustParseAddr("198.18.10.1")
	kproxySKLookupVIP = netip.MustParseAddr("198.18.11.1")
)

// timeWaitBuckets caps each lab host's TIME_WAIT sockets (see setUp).
const timeWaitBuckets = 1024

const (
	iocopyIperfPort, iocopyHTTPPort, iocopyUDPPort = 7001, 7002, 7003
	haproxyIperfPort, haproxyHTTPPort              = 7101, 7102
)

// dataPath is one path under test: where the client sends each kind of
// traffic, and the proxy process if there is one.
type dataPath struct {
	path  Path
	vip   netip.Addr
	udp   bool // the path relays UDP (HAProxy does not)
	proxy *lab.Process
	// start, when set, starts the path's proxy on demand: the userspace
	// kproxy paths take turns on the node (see bench.activate).
	start func(b *testing.B) *lab.Process
	// stop removes what the path's proxy leaves behind once stopped.
	stop func(b *testing.B)
}

func (p *dataPath) addr(port int) string {
	return netip.AddrPortFrom(p.vip, uint16(port)).String()
}

type bench struct {
	topo    *lab.Topology
	backend *lab.Host
	paths   []*dataPath
	table   *Table

	// idleConns is the number of idle connections the RSS row opens.
	idleConns int
	// fdsPerConn is each path's highest descriptor count per idle proxied
	// connection so far (rounds after the first may read low).
	fdsPerConn map[Path]float64

	mu       sync.Mutex
	measured map[string][]reported // group/path → metrics, so a re-run reports, not re-measures
}

func rows(idleConns int) []Row {
	return append([]Row{
		{ID: "bulk-1-stream", Title: "bulk TCP, iperf3, 1 stream", Unit: "Gbit/s", Decimals: 2, MinRatio: 0.85},
		{ID: "bulk-8-streams", Title: "bulk TCP, iperf3 -P 8", Unit: "Gbit/s", Decimals: 2, MinRatio: 0.85},
		{ID: "keepalive-rate", Title: "keep-alive requests, wrk", Unit: "req/s", Decimals: 0, MinRatio: 0.70},
		{ID: "keepalive-p50", Title: "keep-alive p50 latency", Unit: "ms", Decimals: 3, LowerIsBetter: true, NoRatio: true},
		{ID: "keepalive-p99", Title: "keep-alive p99 latency", Unit: "ms", Decimals: 3, LowerIsBetter: true, NoRatio: true},
		{ID: "newconn-rate", Title: "new-connection requests, wrk", Unit: "req/s", Decimals: 0, MinRatio: 0.90},
		{ID: "newconn-p50", Title: "new-connection p50 latency", Unit: "ms", Decimals: 3, LowerIsBetter: true, NoRatio: true},
		{ID: "newconn-p99", Title: "new-connection p99 latency", Unit: "ms", Decimals: 3, LowerIsBetter: true, NoRatio: true},
		{ID: "udp-rate", Title: "UDP request/response, 64 B, 16 flows", Unit: "req/s", Decimals: 0, MinRatio: 0.70},
		{ID: "idle-conn-rss", Title: fmt.Sprintf("proxy RSS per idle proxied TCP connection (%d open)", idleConns), Unit: "KiB/conn", Decimals: 2,
			LowerIsBetter: true, MaxValue: 16, NoRatio: true},
		{ID: "idle-conn-fds", Title: "descriptors per idle proxied TCP connection", Unit: "fds/conn", Decimals: 2,
			LowerIsBetter: true, NoRatio: true},
	}, cpuRows()...)
}

// cpuRows are the CPU cost rows (cpuMeter): the whole machine's, with its
// ratio to DNAT's and the machine's busy share of the run in brackets, and
// the proxy process's own.
func cpuRows() []Row {
	var rs []Row
	for _, w := range []struct{ id, title, unit string }{
		{"bulk-1-stream", "bulk TCP, 1 stream", "ms/GB"},
		{"keepalive", "keep-alive request", "µs/req"},
		{"newconn", "new-connection request", "µs/req"},
		{"udp", "UDP request/response", "µs/req"},
	} {
		rs = append(rs,
			Row{ID: w.id + "-machine-cpu", Title: "machine CPU per " + w.title, Unit: w.unit, Decimals: 1, LowerIsBetter: true},
			Row{ID: w.id + "-proxy-cpu", Title: "proxy process CPU per " + w.title, Unit: w.unit, Decimals: 1, LowerIsBetter: true, NoRatio: true})
	}
	return rs
}

// BenchmarkDataPlane builds one lab and measures every row for every path;
// see the package documentation. Numbers are measured once per invocation
// (run with -benchtime 1x).
func BenchmarkDataPlane(b *testing.B) {
	bin := lab.KproxyBinary(b)
	if lab.InFreshNetns(b, lab.KproxyBinaryEnv+"="+bin) {
		return
	}
	for _, tool := range []string{"iperf3", "wrk", "haproxy", "nginx", "iptables", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("%s is needed (`make deps` installs it): %v", tool, err)
		}
	}
	bn := setUp(b, bin)

	groups := []struct {
		name string
		m    measurement
	}{
		{"bulk-1-stream", bn.iperf(1)},
		{"bulk-8-streams", bn.iperf(8)},
		{"keepalive", bn.wrk(false)},
		{"newconn", bn.wrk(true)},
		{"udp-rate", bn.udpRate},
		{"idle-conn-rss", bn.idleRSS},
	}
	// KPROXY_DATAPLANE_ONLY=name[,name] runs some groups only (the inner
	// run in the namespace cannot take a -bench sub-pattern).
	only := os.Getenv("KPROXY_DATAPLANE_ONLY")
	for _, g := range groups {
		if only != "" && !slices.Contains(strings.Split(only, ","), g.name) {
			continue
		}
		if g.name == "idle-conn-rss" && kernelPath(bn.table.Subject) {
			continue // no proxy process holds the connections
		}
		b.Run(g.name, func(b *testing.B) { bn.eachPath(b, g.name, g.m) })
	}

	md := bn.table.Markdown()
	fmt.Printf("\n%s\n", md)
	if out := os.Getenv("KPROXY_BENCH_TABLE"); out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			b.Errorf("writing the table to KPROXY_BENCH_TABLE=%s: %v", out, err)
		}
	}
}

// measurement is one row for one path: it reports its metrics through
// b.ReportMetric and records them with record(rowID, value).
type measurement func(b *testing.B, p *dataPath, record func(row string, v float64, unit string))

// eachPath runs m as one sub-benchmark per path. A sub-benchmark invoked
// again (b.N > 1 under a time-based -benchtime) reports its first
// measurement instead of measuring again.
func (bn *bench) eachPath(b *testing.B, group string, m measurement) {
	cmp, err := comparisonFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	var paths []*dataPath
	for _, p := range bn.paths {
		if cmp.includes(p.path) {
			paths = append(paths, p)
		}
	}
	rounds := newRoundValues()
	for round := range cmp.rounds {
		for _, p := range rotate(paths, round) {
			name := string(p.path)
			if cmp.rounds > 1 {
				name += fmt.Sprintf("-round%d", round+1)
			}
			b.Run(name, func(b *testing.B) {
				key := group + "/" + name
				bn.mu.Lock()
				done, ok := bn.measured[key]
				bn.mu.Unlock()
				if ok {
					for _, r := range done {
						b.ReportMetric(r.value, r.unit)
					}
					return
				}
				var got []reported
				bn.activate(b, p)
				m(b, p, func(row string, v float64, unit string) {
					b.ReportMetric(v, unit)
					rounds.add(row, p.path, v)
					got = append(got, reported{v, unit})
				})
				bn.mu.Lock()
				bn.measured[key] = got
				bn.mu.Unlock()
			})
		}
	}
	// One round: its values. Several: each path's median in the table,
	// and every round's values printed.
	for _, v := range rounds.medians() {
		bn.table.Set(v.row, v.path, v.value)
		if cost, ok := strings.CutSuffix(v.row, "-busy"); ok {
			bn.table.Annotate(cost+"-machine-cpu", v.path, fmt.Sprintf("busy %.0f%%", v.value))
		}
		if cost, ok := strings.CutSuffix(v.row, "-proxy-user"); ok {
			bn.table.Annotate(cost+"-proxy-cpu", v.path, fmt.Sprintf("user %.0f%%", v.value))
		}
	}
	if cmp.rounds > 1 {
		// Printed, like the table: a benchmark's log does not reach the
		// output from the namespace's child process.
		fmt.Printf("%s, %d rounds:\n%s", group, cmp.rounds, rounds.report(DNAT))
	}
}

type reported struct {
	value float64
	unit  string
}

// setUp builds the lab, the rules and the proxies, and checks that every
// path answers before anything is measured.
func setUp(b *testing.B, kproxyBin string) *bench {
	bn := &bench{idleConns: raiseNoFile(b), fdsPerConn: map[Path]float64{}, measured: map[string][]reported{}}
	bn.table = &Table{Rows: rows(bn.idleConns)}
	bn.topo = lab.NewTopology(b, lab.TopologyOptions{Backends: 1})
	bn.backend = bn.topo.Backends[0]
	lab.StartServers(b, bn.topo, lab.ServerOptions{LargeFileBytes: 1})

	// Room for 10,000 idle connections per proxy plus the new-connection
	// runs' churn: more ephemeral ports, TIME_WAIT reuse for outgoing
	// connections, and conntrack's TIME_WAIT entries expiring quickly so the
	// runs do not fill the (global) conntrack table.
	for _, h := range []*lab.Host{bn.topo.Node, bn.topo.Client} {
		h.MustExec("sysctl", "-q", "-w", "net.ipv4.ip_local_port_range=10000 65000", "net.ipv4.tcp_tw_reuse=1")
	}
	// A new-connection run leaves tens of thousands of TIME_WAIT sockets
	// on the client, the node and the backend for a minute, and the next
	// path's run collides with them (same ports, SYNs into TIME_WAIT):
	// measured, whichever path ran first in a round was up to 3× faster.
	// Capping the buckets lets each run start from the same state.
	for _, h := range []*lab.Host{bn.topo.Node, bn.topo.Client, bn.backend} {
		h.MustExec("sysctl", "-q", "-w", fmt.Sprintf("net.ipv4.tcp_max_tw_buckets=%d", timeWaitBuckets))
	}

	backend := bn.backend.IPv4
	kproxyMode, err := kproxyModeFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	kproxyPath := Kproxy
	switch kproxyMode {
	case "iptables":
		kproxyPath = KproxyIPTables
	case "nftables":
		kproxyPath = KproxyNFTables
	}
	if kernelPath(kproxyPath) {
		bn.table.Rows = iptablesModeRows(bn.table.Rows)
		bn.table.Columns = []Path{Direct, DNAT, kproxyPath}
		bn.table.Subject = kproxyPath
	}
	bn.paths = []*dataPath{
		{path: Direct, vip: backend, udp: true},
		{path: DNAT, vip: dnatVIP, udp: true},
		{path: kproxyPath, vip: kproxyVIP, udp: true},
	}
	portals := hasPortalsFlag(kproxyBin)
	// The other portal kinds' columns, or why one is missing.
	var portalNotes []string
	var absent []Path
	if kproxyPath == Kproxy {
		for _, kind := range []struct {
			path    Path
			vip     netip.Addr
			missing string
		}{
			{KproxyLocal, kproxyLocalVIP, localPortalsMissing(portals)},
			{KproxySKLookup, kproxySKLookupVIP, skLookupPortalsMissing(kproxyBin)},
		} {
			if kind.missing != "" {
				absent = append(absent, kind.path)
				portalNotes = append(portalNotes, fmt.Sprintf("No %s column: %s.", kind.path.Title(), kind.missing))
				continue
			}
			bn.paths = append(bn.paths, &dataPath{path: kind.path, vip: kind.vip, udp: true})
			portalNotes = append(portalNotes, portalNote(kind.path))
		}
		if len(absent) < 2 {
			portalNotes = append(portalNotes, "The kproxy columns take turns: one kproxy runs at a time, started when its path is measured and stopped before any other path is (the socket-lookup program would otherwise run on every local socket lookup of the node, and its UDP reply socket see every datagram the node receives).")
		}
	}
	bn.paths = append(bn.paths, &dataPath{path: IOCopy, vip: iocopyVIP, udp: true}, &dataPath{path: HAProxy, vip: haproxyVIP})
	var nat []string
	for _, pr := range []struct {
		proto string
		port  int
	}{{"tcp", iperfPort}, {"tcp", httpPort}, {"udp", udpPort}} {
		nat = append(nat, fmt.Sprintf("-A PREROUTING -d %s/32 -p %s -m %s --dport %d -j DNAT --to-destination %s",
			dnatVIP, pr.proto, pr.proto, pr.port, netip.AddrPortFrom(backend, uint16(pr.port))))
	}
	redirects := []struct {
		vip             netip.Addr
		proto           string
		port, proxyPort int
	}{
		{iocopyVIP, "tcp", iperfPort, iocopyIperfPort}, {iocopyVIP, "tcp", httpPort, iocopyHTTPPort}, {iocopyVIP, "udp", udpPort, iocopyUDPPort},
		{haproxyVIP, "tcp", iperfPort, haproxyIperfPort}, {haproxyVIP, "tcp", httpPort, haproxyHTTPPort},
	}
	extras, err := extraFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	for i, e := range extras {
		iperfProxy, httpProxy := extraPorts(i)
		bn.paths = append(bn.paths, &dataPath{path: e.Path, vip: extraVIP(i)})
		bn.table.Extra = append(bn.table.Extra, e.Path)
		redirects = append(redirects, []struct {
			vip             netip.Addr
			proto           string
			port, proxyPort int
		}{{extraVIP(i), "tcp", iperfPort, iperfProxy}, {extraVIP(i), "tcp", httpPort, httpProxy}}...)
	}
	var filter []string
	for _, r := range redirects {
		nat = append(nat, fmt.Sprintf("-A PREROUTING -d %s/32 -p %s -m %s --dport %d -j REDIRECT --to-ports %d",
			r.vip, r.proto, r.proto, r.port, r.proxyPort))
		// kproxy's guard: only redirected traffic may reach a proxy port.
		reject := "--reject-with icmp-port-unreachable"
		if r.proto == "tcp" {
			reject = "--reject-with tcp-reset"
		}
		filter = append(filter, fmt.Sprintf("-A INPUT -p %s -m %s --dport %d -m conntrack ! --ctstate DNAT -j REJECT %s",
			r.proto, r.proto, r.proxyPort, reject))
	}
	restore := "*nat\n" + strings.Join(nat, "\n") + "\nCOMMIT\n*filter\n" + strings.Join(filter, "\n") + "\nCOMMIT\n"
	cmd := exec.Command("iptables-restore", "--noflush")
	cmd.Stdin = strings.NewReader(restore)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("installing the benchmark's DNAT and REDIRECT rules: %v\n%s\nrules:\n%s", err, out, restore)
	}
	if _, err := os.Stat("/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_time_wait"); err == nil {
		bn.topo.Node.MustExec("sysctl", "-q", "-w", "net.netfilter.nf_conntrack_tcp_timeout_time_wait=2")
	}

	if kernelPath(kproxyPath) {
		// In the iptables and nftables modes kproxy only writes rules: the
		// kernel carries the traffic, and there is no proxy process to
		// measure.
		startKproxy(b, bn.topo, kproxyBin, b.TempDir(), kproxyPath, kproxyVIP, backend, portals)
	} else {
		// The userspace kproxys take turns: each would remove the other
		// portal kinds' rules or routes at start.
		for _, dp := range bn.paths {
			if portalKind(dp.path) != "" {
				// The top-level benchmark's temporary directory: a
				// sub-benchmark's goes when it ends, kproxy may not.
				dir := b.TempDir()
				dp.start = func(b *testing.B) *lab.Process {
					return startKproxy(b, bn.topo, kproxyBin, dir, dp.path, dp.vip, backend, portals)
				}
			}
			if routesServiceAddresses(dp.path) {
				dp.stop = func(b *testing.B) { flushKproxyRoutes(b, bn.topo.Node) }
			}
		}
		b.Cleanup(func() {
			for _, dp := range bn.paths {
				bn.deactivate(b, dp)
			}
		})
	}

	iocopy := bn.pathOf(IOCopy)
	iocopy.proxy = bn.topo.Node.Start(os.Args[0], relayProcessArg,
		RelaySpec{"tcp", netip.MustParseAddrPort(fmt.Sprintf("0.0.0.0:%d", iocopyIperfPort)), netip.AddrPortFrom(backend, iperfPort)}.String(),
		RelaySpec{"tcp", netip.MustParseAddrPort(fmt.Sprintf("0.0.0.0:%d", iocopyHTTPPort)), netip.AddrPortFrom(backend, httpPort)}.String(),
		RelaySpec{"udp", netip.MustParseAddrPort(fmt.Sprintf("0.0.0.0:%d", iocopyUDPPort)), netip.AddrPortFrom(backend, udpPort)}.String())
	for _, port := range []int{iocopyIperfPort, iocopyHTTPPort} {
		if err := iocopy.proxy.WaitListening("tcp", port, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}

	for i, e := range extras {
		iperfProxy, httpProxy := extraPorts(i)
		p := bn.pathOf(e.Path)
		p.proxy = bn.topo.Node.Start(e.Binary,
			RelaySpec{"tcp", netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(iperfProxy)), netip.AddrPortFrom(backend, iperfPort)}.String(),
			RelaySpec{"tcp", netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(httpProxy)), netip.AddrPortFrom(backend, httpPort)}.String())
		for _, port := range []int{iperfProxy, httpProxy} {
			if err := p.proxy.WaitListening("tcp", port, 10*time.Second); err != nil {
				b.Fatal(err)
			}
		}
	}

	haproxy := bn.pathOf(HAProxy)
	haproxy.proxy = startHAProxy(b, bn.topo, backend, bn.idleConns+16)

	// Every path must answer HTTP with the backend's name, and UDP with the
	// datagram, before anything is measured.
	for _, p := range bn.paths {
		bn.activate(b, p)
		bn.checkPath(b, p)
	}
	bn.table.Header = machineHeader()
	bn.table.Notes = []string{
		fmt.Sprintf("Lab: client → node → one backend (backend-1: nginx, iperf3 -s, a Go UDP echo) over veth and a bridge, MTU 1500; every path uses the same backend. %d cores shared by client, proxies and servers.", runtime.NumCPU()),
		fmt.Sprintf("iperf3 and wrk runs last %d s each; wrk: %d connections, %d threads, GET / (a 10-byte body); new connections with `Connection: close`. UDP: a Go client, %d flows, one %d-byte datagram outstanding per flow, %v.", runSeconds, wrkConns, wrkThreads, udpFlows, udpPayload, udpDuration),
		"CPU rows: machine CPU is every process's and the kernel's CPU time during the run (/proc/stat; busy share of both cores in brackets), per request or per GB received, with its ratio to DNAT's; proxy process CPU is the proxy's own, user + system (the user-space share in brackets; the rest is the kernel working on its system calls). With the machine busy, a path's rate as a share of DNAT's cannot exceed DNAT's machine CPU per request over the path's.",
		fmt.Sprintf("RSS: VmRSS of the proxy process with %d idle keep-alive connections (one request each, then idle) minus VmRSS before, divided by %d. Percentages are of the iptables DNAT path in this run.", bn.idleConns, bn.idleConns),
		"The Go io.Copy relay and HAProxy sit behind the same kind of REDIRECT rule kproxy writes (plus its conntrack --ctstate DNAT guard); HAProxy has no UDP.",
	}
	bn.table.Notes = append(bn.table.Notes, portalNotes...)
	if len(absent) > 0 {
		bn.table.Columns = slices.DeleteFunc(append(Paths(), bn.table.Extra...), func(p Path) bool { return slices.Contains(absent, p) })
	}
	switch kproxyPath {
	case KproxyIPTables:
		bn.table.Notes = append(bn.table.Notes[:len(bn.table.Notes)-2],
			"kproxy iptables mode: kube-proxy's rule model written by kproxy (KUBE-SERVICES → KUBE-SVC-* → KUBE-SEP-* DNAT, with the masquerade-mark and canary chains) against one hand-written PREROUTING DNAT rule; both are kernel NAT, so the target is parity within noise.")
	case KproxyNFTables:
		bn.table.Notes = append(bn.table.Notes[:len(bn.table.Notes)-2],
			"kproxy nftables mode: kube-proxy v1.36's nftables ruleset written by kproxy (table ip kube-proxy: the services chain's verdict map of service addresses → the service chain, whose numgen map DNATs to the endpoint; the filter chains' endpoint, firewall and cluster-IP checks on every new connection) against one hand-written iptables PREROUTING DNAT rule (nf_tables underneath too); both are kernel NAT, so the target is parity within noise.")
	}
	return bn
}

// localPortalsMissing says why there is no local-portal column, "" when
// there is one: binaries from before local portals (KPROXY_BINARY) have
// REDIRECT portals only.
func localPortalsMissing(portalsFlag bool) string {
	if !portalsFlag {
		return "this kproxy binary has no --userspace-portals flag"
	}
	return ""
}

// skLookupPortalsMissing says why there is no socket-lookup column, ""
// when there is one: the binary must offer the kind and the kernel run its
// program (kproxy refuses to start with --userspace-portals=sklookup
// otherwise).
func skLookupPortalsMissing(bin string) string {
	if !hasSKLookupPortals(bin) {
		return "this kproxy binary has no --userspace-portals=sklookup"
	}
	// The probe attaches to the calling thread's namespace: the node's,
	// as every thread of this process is in it.
	runtime.LockOSThread()
	err := sklookup.Probe()
	runtime.UnlockOSThread()
	if err != nil {
		return fmt.Sprintf("this kernel cannot run kproxy's socket-lookup program (%v)", err)
	}
	return ""
}

// portalNote describes how the path of a portal kind other than REDIRECT
// reaches its relays.
func portalNote(p Path) string {
	switch p {
	case KproxyLocal:
		return "kproxy userspace, local portals: `--userspace-portals=local` on a VIP of its own: kproxy makes the VIP local with a route (`local VIP/32 dev lo table local proto 107`) and its relays listen on VIP:port; the harness adds no rule for the path. The node still holds the other paths' rules, so the path's packets pass conntrack and the nat table's few rules here; the scale table runs it on a node without any."
	case KproxySKLookup:
		return "kproxy userspace, socket-lookup portals: `--userspace-portals=sklookup` on a VIP of its own: kproxy makes the VIP local with a route as for local portals, and a BPF sk_lookup program attached to the node's network namespace hands the VIP's service ports to one relay socket per protocol (a TCP listener and a UDP socket on loopback), the relays telling services apart by the connection's or datagram's destination; UDP replies leave through a raw socket. No rule for the path either; its packets pass conntrack and the nat table as the local-portal path's do. Every row of the local-portal column applies: the relays hold the connections (RSS, descriptors) as they do there."
	}
	return ""
}

func (bn *bench) pathOf(p Path) *dataPath {
	for _, dp := range bn.paths {
		if dp.path == p {
			return dp
		}
	}
	return nil
}

// raiseNoFile lifts RLIMIT_NOFILE, the hard limit too when the process may
// (root with CAP_SYS_RESOURCE), else the soft limit to the hard one. It goes
// through syscall.Setrlimit, so the proxies started afterwards inherit it.
// It returns how many idle proxied connections fit in a proxy.
func raiseNoFile(b *testing.B) int {
	lim := syscall.Rlimit{Cur: noFileLimit, Max: noFileLimit}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			b.Fatalf("reading RLIMIT_NOFILE: %v", err)
		}
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			b.Fatalf("raising RLIMIT_NOFILE to its hard limit %d: %v", lim.Max, err)
		}
		b.Logf("RLIMIT_NOFILE hard limit is %d and cannot be raised (no CAP_SYS_RESOURCE?): a proxy fits %d proxied connections, not %d",
			lim.Max, (lim.Max-fdHeadroom)/2, wantIdleConns)
	}
	return int(min(wantIdleConns, (lim.Max-fdHeadroom)/2))
}

// kproxyServices is the services file for a kproxy path: one Service on
// vip with the three benchmark ports, its only endpoint the backend.
func kproxyServices(vip, backend netip.Addr) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Node
metadata: {name: node}
status: {addresses: [{type: InternalIP, address: 198.19.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: bench, namespace: default}
spec:
  clusterIP: %[1]s
  ports:
  - {name: iperf, port: %[3]d, protocol: TCP, targetPort: %[3]d}
  - {name: http, port: %[4]d, protocol: TCP, targetPort: %[4]d}
  - {name: udp, port: %[5]d, protocol: UDP, targetPort: %[5]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: bench-1
  namespace: default
  labels: {kubernetes.io/service-name: bench}
addressType: IPv4
ports:
- {name: iperf, port: %[3]d, protocol: TCP}
- {name: http, port: %[4]d, protocol: TCP}
- {name: udp, port: %[5]d, protocol: UDP}
endpoints:
- {addresses: [%[2]s], nodeName: other}
`, vip, backend, iperfPort, httpPort, udpPort)
}

// startKproxy runs kproxy for path p (iptables or nftables mode, or userspace with
// REDIRECT or local portals) on the bench service at vip, and waits for its
// first sync and for its rules (portals or KUBE-SERVICES entries for the
// VIP's three ports) or its local route.
func startKproxy(b *testing.B, topo *lab.Topology, bin, dir string, p Path, vip, backend netip.Addr, portals bool) *lab.Process {
	file := filepath.Join(dir, string(p)+"-services.yaml")
	if err := os.WriteFile(file, []byte(kproxyServices(vip, backend)), 0o644); err != nil {
		b.Fatal(err)
	}
	kp := topo.Node.Start(bin, kproxyArgs(p, file, portals)...)
	waitSynced(b, kp, 20*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-kp.Exited():
			b.Fatalf("kproxy exited before programming %s: %v\n%s", vip, kp.Err(), kp.Log())
		default:
		}
		var state string
		if routesServiceAddresses(p) {
			state = strings.Join(kproxyRoutes(b, topo.Node), "\n")
			if strings.Contains(state, "local "+vip.String()+" ") {
				return kp
			}
		} else if p == KproxyNFTables {
			// The service-ips map holds "vip . proto . port : goto …"
			// for each of the service's three ports.
			state, _ = topo.Node.Exec("nft", "list", "map", "ip", "kube-proxy", "service-ips")
			if strings.Count(state, vip.String()+" . ") >= 3 {
				return kp
			}
		} else {
			state, _ = topo.Node.Exec("iptables-save", "-t", "nat")
			if strings.Count(state, "-d "+vip.String()+"/32") >= 3 {
				return kp
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("kproxy did not program %s within 20 s; node state:\n%s\nkproxy log:\n%s", vip, state, kp.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// activate readies p for a measurement: every other path's on-demand proxy
// is stopped, and p's started if it starts on demand. So one userspace
// kproxy runs at a time, and none beside another path's measurement.
func (bn *bench) activate(b *testing.B, p *dataPath) {
	for _, o := range bn.paths {
		if o != p && o.start != nil {
			bn.deactivate(b, o)
		}
	}
	if p.start != nil && p.proxy == nil {
		p.proxy = p.start(b)
		bn.checkPath(b, p)
		// The probes' connections close in the relay a moment later;
		// the RSS row counts the proxy's sockets from here.
		pid, last := p.proxy.Pid(), -1
		waitFor(5*time.Second, func() bool {
			n := countSockets(pid)
			settled := n == last
			last = n
			time.Sleep(300 * time.Millisecond)
			return settled
		})
	}
}

// deactivate stops p's on-demand proxy and removes what it leaves.
func (bn *bench) deactivate(b *testing.B, p *dataPath) {
	if p.start == nil || p.proxy == nil {
		return
	}
	if err := p.proxy.Stop(); err != nil {
		b.Logf("stopping %s: %v", p.proxy, err)
	}
	p.proxy = nil
	if p.stop != nil {
		p.stop(b)
	}
}

// haproxyConfig: mode tcp with splice-auto, threads = cores, timeouts long
// enough for the idle-connection row, no logging. maxconn covers the idle
// connections; maxpipes is kept small (pipes serve only connections that are
// splicing at the moment) so HAProxy's descriptor budget fits RLIMIT_NOFILE.
func haproxyConfig(backend netip.Addr, maxconn int) string {
	return fmt.Sprintf(`global
	maxconn %d
	maxpipes 32
	nbthread %d
defaults
	mode tcp
	option splice-auto
	timeout connect 5s
	timeout client 1h
	timeout server 1h
listen iperf
	bind 0.0.0.0:%d
	server b1 %s
listen http
	bind 0.0.0.0:%d
	server b1 %s
`, maxconn, runtime.NumCPU(), haproxyIperfPort, netip.AddrPortFrom(backend, iperfPort), haproxyHTTPPort, netip.AddrPortFrom(backend, httpPort))
}

func startHAProxy(b *testing.B, topo *lab.Topology, backend netip.Addr, maxconn int) *lab.Process {
	cfg := filepath.Join(b.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(backend, maxconn)), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("haproxy", "-c", "-f", cfg).CombinedOutput(); err != nil {
		b.Fatalf("haproxy rejects its config: %v\n%s", err, out)
	}
	// -db: stay in the foreground, one process (no master-worker), so the
	// pid Start returns is the one whose RSS is measured.
	p := topo.Node.Start("haproxy", "-db", "-f", cfg)
	for _, port := range []int{haproxyIperfPort, haproxyHTTPPort} {
		if err := p.WaitListening("tcp", port, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// checkPath fails the benchmark, with the proxy's log, unless the path
// answers HTTP (and UDP where it relays UDP). kproxy may need a moment after
// its rules appear, so this retries for a few seconds.
func (bn *bench) checkPath(b *testing.B, p *dataPath) {
	b.Helper()
	var lastErr error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if lastErr = bn.probe(p); lastErr == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	log := ""
	if p.proxy != nil {
		log = "\nproxy log:\n" + p.proxy.Log()
	}
	save, _ := bn.topo.Node.Exec("iptables-save")
	ruleset, _ := bn.topo.Node.Exec("nft", "list", "ruleset")
	b.Fatalf("path %s (%s) does not work: %v%s\nnode rules:\n%s\nnftables ruleset:\n%s", p.path.Title(), p.vip, lastErr, log, save, clipLog(ruleset))
}

func (bn *bench) probe(p *dataPath) error {
	client := bn.topo.Client.HTTPClient()
	client.Timeout = 2 * time.Second
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + p.addr(httpPort) + "/")
	if err != nil {
		return fmt.Errorf("HTTP: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.TrimSpace(string(body)) != bn.backend.Name {
		return fmt.Errorf("HTTP GET / answered %q (%v), want %q", body, err, bn.backend.Name)
	}
	if !p.udp {
		return nil
	}
	conn, err := bn.topo.Client.Dial("udp", p.addr(udpPort))
	if err != nil {
		return fmt.Errorf("UDP: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	msg := []byte("dataplane-probe")
	if _, err := conn.Write(msg); err != nil {
		return fmt.Errorf("UDP: %w", err)
	}
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		return fmt.Errorf("UDP echo answered %q (%v), want %q", buf[:n], err, msg)
	}
	return nil
}

// alive fails the benchmark if the path's proxy has exited.
func alive(b *testing.B, p *dataPath) {
	b.Helper()
	if p.proxy == nil {
		return
	}
	select {
	case <-p.proxy.Exited():
		b.Fatalf("%s exited: %v\n%s", p.proxy, p.proxy.Err(), p.proxy.Log())
	default:
	}
}

func (bn *bench) iperf(streams int) measurement {
	row := "bulk-1-stream"
	if streams > 1 {
		row = "bulk-8-streams"
	}
	return func(b *testing.B, p *dataPath, record func(string, float64, string)) {
		alive(b, p)
		cmd := bn.topo.Client.Command("iperf3", "-c", p.vip.String(), "-p", strconv.Itoa(iperfPort),
			"-t", strconv.Itoa(runSeconds), "-P", strconv.Itoa(streams), "-J")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		meter := startCPU(p)
		out, runErr := cmd.Output()
		res, err := ParseIperf3JSON(out)
		if err != nil {
			b.Fatalf("iperf3 through %s: %v (exit: %v)\nstderr: %s%s", p.path.Title(), err, runErr, stderr.String(), proxyLog(p))
		}
		record(row, res.ReceivedBitsPerSecond/1e9, "Gbit/s")
		meter.record(record, row, float64(res.ReceivedBytes)/1e9, true)
		b.Logf("%s: %.2f Gbit/s, %d retransmits, %d streams", p.path.Title(), res.ReceivedBitsPerSecond/1e9, res.Retransmits, res.Streams)
		alive(b, p)
	}
}

func (bn *bench) wrk(newConnections bool) measurement {
	prefix := "keepalive"
	if newConnections {
		prefix = "newconn"
	}
	return func(b *testing.B, p *dataPath, record func(string, float64, string)) {
		alive(b, p)
		args := []string{"-t", strconv.Itoa(wrkThreads), "-c", strconv.Itoa(wrkConns), "-d", strconv.Itoa(runSeconds) + "s", "--latency"}
		if newConnections {
			args = append(args, "-H", "Connection: close")
		}
		args = append(args, "http://"+p.addr(httpPort)+"/")
		meter := startCPU(p)
		out, err := bn.topo.Client.Exec("wrk", args...)
		if err != nil {
			b.Fatalf("wrk through %s: %v%s", p.path.Title(), err, proxyLog(p))
		}
		res, err := ParseWrk(out)
		if err != nil {
			b.Fatalf("wrk through %s: %v%s", p.path.Title(), err, proxyLog(p))
		}
		if res.Non2xx > 0 || res.Requests == 0 {
			b.Fatalf("wrk through %s: %d requests, %d not 2xx/3xx:\n%s%s", p.path.Title(), res.Requests, res.Non2xx, out, proxyLog(p))
		}
		if res.SocketErrors > 0 {
			b.Logf("wrk through %s reported %d socket errors:\n%s", p.path.Title(), res.SocketErrors, out)
		}
		record(prefix+"-rate", res.RequestsPerSecond, "req/s")
		record(prefix+"-p50", float64(res.P50)/float64(time.Millisecond), "p50-ms")
		record(prefix+"-p99", float64(res.P99)/float64(time.Millisecond), "p99-ms")
		meter.record(record, prefix, float64(res.Requests), false)
		alive(b, p)
	}
}

// udpRate runs udpFlows closed-loop flows from the client, each with one
// datagram outstanding, for udpDuration and counts the replies. A datagram
// lost on the way waits out a short deadline and is counted as lost.
func (bn *bench) udpRate(b *testing.B, p *dataPath, record func(string, float64, string)) {
	if !p.udp {
		b.Skipf("%s does not relay UDP", p.path.Title())
	}
	alive(b, p)
	conns := make([]net.Conn, 0, udpFlows)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	err := bn.topo.Client.InNetns(func() error {
		for range udpFlows {
			c, err := net.Dial("udp", p.addr(udpPort))
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		return nil
	})
	if err != nil {
		b.Fatalf("UDP flows to %s: %v", p.path.Title(), err)
	}
	var replies, lost atomic.Int64
	meter := startCPU(p)
	stop := time.Now().Add(udpDuration)
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, buf := make([]byte, udpPayload), make([]byte, 2048)
			for time.Now().Before(stop) {
				if _, err := c.Write(msg); err != nil {
					lost.Add(1)
					continue
				}
				_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				if n, err := c.Read(buf); err != nil || n != udpPayload {
					lost.Add(1)
					continue
				}
				replies.Add(1)
			}
		}()
	}
	wg.Wait()
	if replies.Load() == 0 {
		b.Fatalf("no UDP replies through %s (%d lost)%s", p.path.Title(), lost.Load(), proxyLog(p))
	}
	if lost.Load() > 0 {
		b.Logf("%s: %d datagrams lost of %d", p.path.Title(), lost.Load(), replies.Load()+lost.Load())
	}
	record("udp-rate", float64(replies.Load())/udpDuration.Seconds(), "req/s")
	meter.record(record, "udp", float64(replies.Load()), false)
	alive(b, p)
}

// idleRSS opens bn.idleConns keep-alive connections through the path, makes
// one request on each, leaves them idle and reads the proxy's RSS growth.
// A calibration with a few connections first measures the proxy's
// descriptors per connection (the plain io.Copy relay holds splice pipes
// while idle): a proxy that could not hold bn.idleConns within its
// RLIMIT_NOFILE is measured with as many as fit, and the table says so.
func (bn *bench) idleRSS(b *testing.B, p *dataPath, record func(string, float64, string)) {
	if p.proxy == nil {
		b.Skipf("%s has no proxy process", p.path.Title())
	}
	alive(b, p)
	pid := p.proxy.Pid()
	fdsBefore, socketsBefore := countFDs(b, pid), countSockets(pid)
	limit := openFileLimit(b, pid)
	b.Logf("%s holds %d descriptors (%d sockets) before, may open %d", p.proxy, fdsBefore, socketsBefore, limit)

	const calibration = 100
	conns := bn.openIdle(b, p, calibration)
	waitFor(5*time.Second, func() bool { return countSockets(pid) >= socketsBefore+2*calibration })
	time.Sleep(300 * time.Millisecond)
	socketsPerConn := float64(countSockets(pid)-socketsBefore) / calibration
	fdsPerConn := float64(countFDs(b, pid)-fdsBefore) / calibration
	bn.closeIdle(b, pid, socketsBefore, conns)
	// Sockets, not all descriptors, show whether connections are proxied: a
	// proxy's pooled descriptors (Go's splice pipes) come and go with its
	// garbage collector. A socket closing meanwhile (an earlier probe's) can
	// make it read a hair under 2.
	if socketsPerConn < 1.5 {
		b.Fatalf("%s holds %.2f sockets per proxied connection, want 2 or more (is it proxying?)", p.proxy, socketsPerConn)
	}
	// A round after the first may find pooled descriptors to reuse and read
	// low: the path's highest count so far budgets the descriptors.
	fdsPerConn = max(fdsPerConn, 2, bn.fdsPerConn[p.path])
	bn.fdsPerConn[p.path] = fdsPerConn
	n, why := idleConnections(bn.idleConns, limit, fdsBefore, fdsPerConn, portalKind(p.path) != "")
	if n < bn.idleConns {
		note := fmt.Sprintf("with %d connections: %s", n, why)
		bn.table.Annotate("idle-conn-rss", p.path, note)
		b.Logf("%s: measured %s", p.proxy, note)
	}

	before := readRSS(b, pid)
	conns = bn.openIdle(b, p, n)
	defer bn.closeIdle(b, pid, socketsBefore, conns)
	// A few sockets of slack: one open before (an earlier probe's) may
	// close meanwhile.
	if !waitFor(30*time.Second, func() bool { return countSockets(pid) >= socketsBefore+2*n-4 }) {
		b.Fatalf("%s holds %d sockets with %d connections open (had %d before), want at least %d more",
			p.proxy, countSockets(pid), n, socketsBefore, 2*n)
	}
	time.Sleep(time.Second) // settle: lazily freed buffers, a GC cycle
	after := readRSS(b, pid)
	alive(b, p)
	perConn := float64(after-before) / float64(n)
	b.Logf("%s: %d descriptors before, %.2f per connection; VmRSS %d KiB before, %d KiB with %d idle connections: %.2f KiB per connection",
		p.proxy, fdsBefore, fdsPerConn, before, after, n, perConn)
	record("idle-conn-rss", perConn, "KiB/conn")
	record("idle-conn-fds", fdsPerConn, "fds/conn")
}

// idleConnections is how many of the wanted idle connections the RSS row
// opens through a proxy that may open limit descriptors, holds fdsBefore
// and takes fdsPerConn for each connection, and why it is fewer. kproxy
// (kproxyShare) also admits no more on one service port than the port's
// share of its RLIMIT_NOFILE (lb/fdbudget), less some slack for the
// calibration's connections still closing.
func idleConnections(want, limit, fdsBefore int, fdsPerConn float64, kproxyShare bool) (int, string) {
	n, why := want, ""
	// Beyond its two sockets a proxy may hold pooled descriptors the
	// calibration reused rather than opened (Go's splice pipes), so extras
	// are budgeted at half as much again.
	budget := fdsPerConn
	if fdsPerConn > 2.05 {
		budget = 2 + 1.5*(fdsPerConn-2) + 1
	}
	if fit := int(float64(limit-fdsBefore-fdHeadroom/2) / budget); fit < n {
		n, why = fit, fmt.Sprintf("%.1f descriptors each, RLIMIT_NOFILE %d", fdsPerConn, limit)
	}
	const closingSlack = 64
	if share := fdbudget.PortLimitsFor(uint64(max(limit, 0))).Connections - closingSlack; kproxyShare && share < n {
		n, why = share, fmt.Sprintf("kproxy's share per service port of RLIMIT_NOFILE %d", limit)
	}
	return n, why
}

// openIdle opens n connections from the client through the path and makes
// one keep-alive request on each; it fails the benchmark unless all work.
func (bn *bench) openIdle(b *testing.B, p *dataPath, n int) []net.Conn {
	b.Helper()
	addr := p.addr(httpPort)
	conns := make([]net.Conn, 0, n)
	err := bn.topo.Client.InNetns(func() error {
		for range n {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return fmt.Errorf("connection %d: %w", len(conns)+1, err)
			}
			conns = append(conns, c)
		}
		return nil
	})
	if err != nil {
		for _, c := range conns {
			c.Close()
		}
		b.Fatalf("opening %d connections through %s: %v%s", n, p.path.Title(), err, proxyLog(p))
	}
	// One request per connection, so each carries traffic before idling.
	var failed atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	work := make(chan net.Conn)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := []byte("GET / HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
			for c := range work {
				if err := requestOnce(c, req, bn.backend.Name); err != nil {
					failed.Add(1)
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
				}
			}
		}()
	}
	for _, c := range conns {
		work <- c
	}
	close(work)
	wg.Wait()
	if k := failed.Load(); k > 0 {
		for _, c := range conns {
			c.Close()
		}
		b.Fatalf("%d of %d requests on idle connections through %s failed, first: %v%s", k, n, p.path.Title(), firstErr, proxyLog(p))
	}
	return conns
}

// closeIdle closes conns and waits for the proxy to close its sockets, so
// the next measurement starts clean. (Pipes may stay: Go keeps splice pipes
// in a pool until a garbage collection.)
func (bn *bench) closeIdle(b *testing.B, pid, socketsBefore int, conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
	if !waitFor(30*time.Second, func() bool { return countSockets(pid) <= socketsBefore+64 }) {
		b.Logf("pid %d still holds %d sockets 30 s after its connections closed", pid, countSockets(pid))
	}
}

// countSockets counts pid's socket descriptors.
func countSockets(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}

// requestOnce sends a GET on c and reads the whole response, leaving c open.
func requestOnce(c net.Conn, req []byte, want string) error {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 1024), nil)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(body)); got != want {
		return fmt.Errorf("answer %q, want %q", got, want)
	}
	return nil
}

func readRSS(b *testing.B, pid int) int64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatalf("reading the proxy's status: %v", err)
	}
	kib, err := ParseVmRSS(string(status))
	if err != nil {
		b.Fatalf("pid %d: %v", pid, err)
	}
	return kib
}

// openFileLimit reads the soft "Max open files" of pid.
func openFileLimit(b *testing.B, pid int) int {
	b.Helper()
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		b.Fatalf("reading the proxy's limits: %v", err)
	}
	for line := range strings.Lines(string(limits)) {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					return n
				}
			}
		}
	}
	b.Fatalf("no Max open files line in /proc/%d/limits:\n%s", pid, limits)
	return 0
}

func countFDs(b *testing.B, pid int) int {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		b.Logf("listing descriptors of pid %d: %v", pid, err)
		return -1
	}
	return len(entries)
}

// proxyCPU is the CPU time the path's proxy process used so far; false
// when the path has no proxy process or its times cannot be read.
func proxyCPU(p *dataPath) (ProcCPU, bool) {
	if p.proxy == nil {
		return ProcCPU{}, false
	}
	cpu, err := procCPU(p.proxy.Pid())
	return cpu, err == nil
}

func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func proxyLog(p *dataPath) string {
	if p.proxy == nil {
		return ""
	}
	log := p.proxy.Log()
	if len(log) > 4000 {
		log = "…" + log[len(log)-4000:]
	}
	return "\nlog of " + p.proxy.String() + ":\n" + log
}

// machineHeader is the table's first lines: when and on what it ran.
func machineHeader() []string {
	return []string{
		"**kproxy data-plane benchmark** (`go test -run '^$' -bench '^BenchmarkDataPlane$' -benchtime 1x ./bench/dataplane/`)",
		"Date: " + time.Now().UTC().Format("2006-01-02 15:04 MST"),
		"Machine: " + benchtable.Machine(),
	}
}
