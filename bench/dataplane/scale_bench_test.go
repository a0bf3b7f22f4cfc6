package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	"kproxy.dev/kproxy/bench/lab"
)

// The scale benchmark's process tree: BenchmarkDataPlaneScale (the
// orchestrator, in the host's namespace) runs the test binary once per
// (path, services) node with scaleConfigEnv set; that child re-executes
// itself in a fresh network namespace (lab.InFreshNetns), builds the lab,
// measures and writes its values to the file scaleResultEnv names.
const (
	scaleConfigEnv = "KPROXY_DATAPLANE_SCALE_CONFIG"
	scaleResultEnv = "KPROXY_DATAPLANE_SCALE_RESULT"
	// udpFlowsArg makes the test binary run the new-UDP-flow client (see
	// TestMain) in the client's namespace, a process of its own.
	udpFlowsArg = "dataplane-udp-flows"
)

// New-UDP-flow client settings: 16 workers over 8 client addresses and
// ports 10000-65000 give 440,000 source pairs, so a pair comes back after
// tens of seconds at the rates measured (the node's conntrack UDP timeout is
// set to 2 s, kproxy's relay flows idle out after 250 ms).
const (
	udpFlowWorkers = 16
	udpFlowTimeout = 200 * time.Millisecond
	udpFlowPortLo  = 10000
	udpFlowPortHi  = 65000
)

// udpFlowSources are the client's extra addresses the flows come from.
func udpFlowSources() []netip.Addr {
	var out []netip.Addr
	for i := range 8 {
		out = append(out, netip.AddrFrom4([4]byte{198, 19, 0, byte(100 + i)}))
	}
	return out
}

// kproxyStartTimeout bounds kproxy's start-up to its first finished sync
// (30,000 services in the userspace mode open 30,000 listeners).
const kproxyStartTimeout = 5 * time.Minute

// BenchmarkDataPlaneScale measures, for each path of ScalePaths and each
// number of services of ScaleEnv (and one), new-connection requests and new
// UDP flows per second through one service, each (path, services) pair on a
// fresh node, and prints the scale table (also written to
// $KPROXY_BENCH_TABLE when set). KPROXY_DATAPLANE_ROUNDS repeats every node,
// in a different order each round; the table has medians.
//
//	sudo go test -run '^$' -bench '^BenchmarkDataPlaneScale$' -benchtime 1x ./bench/dataplane/
func BenchmarkDataPlaneScale(b *testing.B) {
	if s := os.Getenv(scaleConfigEnv); s != "" {
		cfg, err := ParseScaleConfig(s)
		if err != nil {
			b.Fatal(err)
		}
		bin := lab.KproxyBinary(b)
		if lab.InFreshNetns(b) {
			return
		}
		runScaleNode(b, bin, cfg, os.Getenv(scaleResultEnv))
		return
	}
	lab.RequireRoot(b)
	scales, err := ParseScales(os.Getenv(ScaleEnv))
	if err != nil {
		b.Fatal(err)
	}
	cmp, err := comparisonFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	bin := lab.KproxyBinary(b)
	portals := hasPortalsFlag(bin)
	var paths []Path
	for _, p := range ScalePaths() {
		if cmp.includes(p) && (p != KproxyLocal || portals) {
			paths = append(paths, p)
		}
	}
	if !portals {
		fmt.Printf("%s has no --userspace-portals flag: the local-portal path is not measured\n", bin)
	}

	// The userspace relays need descriptors per service port; where the
	// hard RLIMIT_NOFILE cannot be raised (no CAP_SYS_RESOURCE, as in some
	// containers) a number of services that does not fit is left out for
	// those paths, and the largest whole thousand that fits is added for
	// every path.
	limit := raiseNoFileQuietly()
	loops := runtime.NumCPU()
	fit := fittingScale(limit, loops)
	var fdNote string
	for _, n := range scales {
		if userspaceFDs(n+1, loops) > limit {
			fdNote = fmt.Sprintf("The userspace paths need about %d descriptors at %s (%d per service port: a listener and a duplicate for each of its %d event loops, plus what the runs' connections and UDP flows hold); RLIMIT_NOFILE here is %d and cannot be raised (no CAP_SYS_RESOURCE), so they run up to %s, added as a row for every path.",
				userspaceFDs(n+1, loops), benchtable.Services(n), 1+loops, loops, limit, benchtable.Services(fit))
			if fit > 0 && !slices.Contains(scales, fit) {
				scales = append(scales, fit)
				slices.Sort(scales)
			}
			break
		}
	}
	tab := &ScaleTable{Scales: scales, Subject: KproxyLocal, MaxDrop: 0.05}
	runs := func(c ScaleConfig) bool {
		if (c.Path == Kproxy || c.Path == KproxyLocal) && userspaceFDs(c.Services+1, loops) > limit {
			tab.Skip(c.Services, c.Path, "fd limit")
			return false
		}
		return true
	}
	rounds := newRoundValues()
	loadBefore := benchtable.LoadAverage()
	began := time.Now()
	wall := map[ScaleConfig][]time.Duration{}
	for round := range cmp.rounds {
		for _, c := range scaleOrder(scales, paths, round) {
			if !runs(c) {
				continue
			}
			start := time.Now()
			values, err := runScaleChild(b, bin, c)
			if err != nil {
				b.Fatalf("round %d, %s: %v", round+1, c, err)
			}
			took := time.Since(start)
			wall[c] = append(wall[c], took)
			for row, v := range values {
				rounds.add(ScaleRowID(row, c.Services), c.Path, v)
			}
			fmt.Printf("scale round %d %-22s %5.1f s: new connections %.0f/s, new UDP flows %.0f/s, start-up %.1f s\n",
				round+1, c, took.Seconds(), values["newconn-rate"], values["udp-flows-rate"], values["startup"])
		}
	}
	for _, v := range rounds.medians() {
		metric, n, ok := splitScaleRowID(v.row)
		if ok {
			tab.Set(metric, n, v.path, v.value)
		}
	}
	fmt.Printf("scale, %d rounds (%% of DNAT at the same number of services in the same round):\n%s", cmp.rounds, rounds.report(DNAT))

	tab.Header = []string{
		"**kproxy data-plane benchmark at scale** (`go test -run '^$' -bench '^BenchmarkDataPlaneScale$' -benchtime 1x ./bench/dataplane/`)",
		"Date: " + time.Now().UTC().Format("2006-01-02 15:04 MST"),
		"Machine: " + benchtable.Machine(),
		fmt.Sprintf("Load average (1, 5, 15 min) before: %s, after: %s; %d rounds, medians; the whole run took %s",
			loadBefore, benchtable.LoadAverage(), cmp.rounds, time.Since(began).Round(time.Second)),
	}
	tab.Notes = scaleNotes(scales, wall)
	if fdNote != "" {
		tab.Notes = append(tab.Notes, fdNote)
	}
	md := tab.Markdown()
	fmt.Printf("\n%s\n", md)
	if out := os.Getenv("KPROXY_BENCH_TABLE"); out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			b.Errorf("writing the table to KPROXY_BENCH_TABLE=%s: %v", out, err)
		}
	}
}

// scaleOrder is one round's nodes: the numbers of services ascending in
// even rounds and descending in odd ones, the paths rotated each round, so
// no node always runs first, last or right after the same one.
func scaleOrder(scales []int, paths []Path, round int) []ScaleConfig {
	ns := slices.Clone(scales)
	if round%2 == 1 {
		slices.Reverse(ns)
	}
	var out []ScaleConfig
	for _, n := range ns {
		for _, p := range rotate(paths, round) {
			out = append(out, ScaleConfig{Path: p, Services: n})
		}
	}
	return out
}

func splitScaleRowID(id string) (metric string, n int, ok bool) {
	i := strings.LastIndexByte(id, '@')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	return id[:i], n, err == nil
}

func scaleNotes(scales []int, wall map[ScaleConfig][]time.Duration) []string {
	notes := []string{
		fmt.Sprintf("Lab: client → node → one backend, as in the data-plane table; %d cores shared by client, node and servers. Each (path, number of services) runs on a node of its own (a fresh network namespace, lab and servers), so no path pays for another's rules or conntrack entries.", runtime.NumCPU()),
		"Services: the measured one (a TCP port for nginx, a UDP port for the echo server, one endpoint: the backend) and N-1 others in 198.18.0.0/16, one TCP port and one endpoint each; the measured service is last in the services file and by name, so its rules come after every other service's in the DNAT payload and the userspace portals; kproxy's iptables mode writes them first in KUBE-SERVICES all the same (the position row), so its column is the best case, not a walk over the others; kproxy's nftables mode finds every service with one lookup in the service-ips verdict map, wherever it sits (no position; its rule count is `nft list ruleset`'s rules, not iptables'). DNAT: a hand-written iptables-restore payload shaped like kube-proxy's (a KUBE-SERVICES rule per service port, jumping to a KUBE-SVC chain, then a KUBE-SEP chain with the masquerade mark and the DNAT, the NodePort jump last). kproxy paths: the real binary fed a services file with the same services, --iptables-sync-period=1h so no periodic resync lands in a run; the local-portal node carries no netfilter rule at all.",
		fmt.Sprintf("Rates: wrk %d connections, %d threads, %d s, `Connection: close`; new UDP flows: %d workers, each flow a fresh socket from one of %d client addresses × ports %d-%d (no pair comes back within the run's conntrack and relay timeouts), one %d-byte datagram and its echo, %v.", wrkConns, wrkThreads, runSeconds, udpFlowWorkers, len(udpFlowSources()), udpFlowPortLo, udpFlowPortHi, udpPayload, udpDuration),
		"Cells: value (% of DNAT's rate at 1 service / % of the path's own rate at 1 service), both from the same run. Start-up: iptables-restore for DNAT; for kproxy, from its start to its first finished sync (/metrics), all rules, routes and relays in place.",
	}
	var parts []string
	for _, n := range scales {
		var sum time.Duration
		k := 0
		for c, ds := range wall {
			if c.Services == n {
				for _, d := range ds {
					sum += d
					k++
				}
			}
		}
		if k > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f s", benchtable.Services(n), (sum/time.Duration(k)).Seconds()))
		}
	}
	notes = append(notes, "Time per node (lab, servers, start-up, the two runs, teardown), mean over paths and rounds: "+strings.Join(parts, ", ")+".")
	return notes
}

// runScaleChild runs one node in a child process and returns its values.
func runScaleChild(b *testing.B, bin string, c ScaleConfig) (map[string]float64, error) {
	result := filepath.Join(b.TempDir(), "result.json")
	cmd := exec.Command(os.Args[0], "-test.run", "^$", "-test.bench", "^BenchmarkDataPlaneScale$", "-test.benchtime", "1x", "-test.timeout", "20m")
	cmd.Env = append(os.Environ(), scaleConfigEnv+"="+c.String(), scaleResultEnv+"="+result, lab.KproxyBinaryEnv+"="+bin)
	// The child's lab goes with it if this process is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	data, err := os.ReadFile(result)
	if err != nil {
		return nil, fmt.Errorf("reading its result: %w\n%s", err, out)
	}
	var values map[string]float64
	if err := json.Unmarshal(data, &values); err != nil {
		return nil, fmt.Errorf("its result %s: %w", data, err)
	}
	return values, nil
}

// runScaleNode builds one node's lab, programs its services, measures and
// writes the values to resultFile.
func runScaleNode(b *testing.B, bin string, c ScaleConfig, resultFile string) {
	raiseNoFile(b)
	bn := &bench{measured: map[string][]reported{}}
	bn.topo = lab.NewTopology(b, lab.TopologyOptions{Backends: 1})
	bn.backend = bn.topo.Backends[0]
	lab.StartServers(b, bn.topo, lab.ServerOptions{LargeFileBytes: 1, NoIperf: true})
	for _, h := range []*lab.Host{bn.topo.Node, bn.topo.Client, bn.backend} {
		h.MustExec("sysctl", "-q", "-w", "net.ipv4.ip_local_port_range=10000 65000", "net.ipv4.tcp_tw_reuse=1",
			fmt.Sprintf("net.ipv4.tcp_max_tw_buckets=%d", timeWaitBuckets))
	}
	for _, a := range udpFlowSources() {
		bn.topo.Client.MustExec("ip", "addr", "add", a.String()+"/24", "dev", "eth0")
	}
	backend := bn.backend.IPv4
	p := &dataPath{path: c.Path, vip: kproxyVIP, udp: true}
	values := map[string]float64{}

	start := time.Now()
	var kp *lab.Process
	if c.Path == DNAT {
		restore := exec.Command("iptables-restore", "--noflush")
		restore.Stdin = strings.NewReader(ScaleDNATRules(c.Services, kproxyVIP, backend, httpPort, udpPort))
		if out, err := restore.CombinedOutput(); err != nil {
			b.Fatalf("installing %d kube-proxy-shaped services: %v\n%s", c.Services, err, out)
		}
	} else {
		file := filepath.Join(b.TempDir(), "services.yaml")
		if err := os.WriteFile(file, []byte(ScaleServicesYAML(c.Services, kproxyVIP, backend, httpPort, udpPort)), 0o644); err != nil {
			b.Fatal(err)
		}
		kp = bn.topo.Node.Start(bin, kproxyArgs(c.Path, file, hasPortalsFlag(bin))...)
		waitSynced(b, kp, kproxyStartTimeout)
		// A relay that could not open its descriptors backs off and
		// retries while the sync counts as done.
		if log := kp.Log(); strings.Contains(log, "too many open files") {
			b.Fatalf("%s: kproxy ran out of descriptors (RLIMIT_NOFILE %d) starting its relays:\n%s", c, raiseNoFileQuietly(), clipLog(log))
		}
		if !kernelPath(c.Path) {
			p.proxy = kp
		}
	}
	values["startup"] = time.Since(start).Seconds()
	b.Logf("%s: in place after %.1f s", c, values["startup"])
	// Conntrack timeouts are the node namespace's own: short ones keep the
	// new-connection and new-flow runs from filling the (global) table.
	if _, err := os.Stat("/proc/sys/net/netfilter/nf_conntrack_udp_timeout"); err == nil {
		bn.topo.Node.MustExec("sysctl", "-q", "-w", "net.netfilter.nf_conntrack_tcp_timeout_time_wait=2",
			"net.netfilter.nf_conntrack_udp_timeout=2", "net.netfilter.nf_conntrack_udp_timeout_stream=2")
	}
	bn.checkPath(b, p)
	if kp != nil {
		settle(kp)
	}
	if kp != nil {
		values["proxy-fds"] = float64(countFDs(b, kp.Pid()))
	}
	if pos := servicesRulePosition(bn.topo.Node, kproxyVIP); pos > 0 {
		values["rule-position"] = float64(pos)
	}
	if c.Path == KproxyNFTables {
		values["node-rules"] = float64(countNFTRules(bn.topo.Node))
	} else {
		values["node-rules"] = float64(countRules(bn.topo.Node))
	}
	values["local-routes"] = float64(len(kproxyRoutes(b, bn.topo.Node)))

	record := func(row string, v float64, unit string) {
		values[row] = v
		b.ReportMetric(v, unit)
	}
	bn.wrk(true)(b, p, record)
	bn.udpNewFlows(b, p, record)

	if kp != nil {
		if err := kp.Stop(); err != nil {
			b.Logf("stopping kproxy: %v", err)
		}
	}
	// kproxy leaves its routes when it stops, as kube-proxy leaves its
	// rules; the namespace goes with the node, but remove them as an
	// operator would (`kproxy --cleanup` does the same).
	if left := kproxyRoutes(b, bn.topo.Node); len(left) > 0 {
		flushKproxyRoutes(b, bn.topo.Node)
		b.Logf("%s: removed %d local routes kproxy left", c, len(left))
	}
	data, err := json.Marshal(values)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(resultFile, data, 0o644); err != nil {
		b.Fatalf("writing the result: %v", err)
	}
}

// udpNewFlows runs the new-UDP-flow client in the client's namespace.
func (bn *bench) udpNewFlows(b *testing.B, p *dataPath, record func(string, float64, string)) {
	alive(b, p)
	var sources []string
	for _, a := range udpFlowSources() {
		sources = append(sources, a.String())
	}
	cmd := bn.topo.Client.Command(os.Args[0], udpFlowsArg, p.addr(udpPort), udpDuration.String(), strings.Join(sources, ","))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	meter := startCPU(p)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("new UDP flows through %s: %v\n%s%s", p.path.Title(), err, stderr.String(), proxyLog(p))
	}
	res, err := ParseUDPFlowsResult(string(out))
	if err != nil {
		b.Fatalf("new UDP flows through %s: %v%s", p.path.Title(), err, proxyLog(p))
	}
	if res.Flows == 0 {
		b.Fatalf("no new UDP flow through %s was answered: %v%s", p.path.Title(), res, proxyLog(p))
	}
	b.Logf("%s: %v", p.path.Title(), res)
	record("udp-flows-rate", res.Rate(), "flows/s")
	record("udp-flows-lost", float64(res.Lost), "lost")
	meter.record(record, "udp-flows", float64(res.Flows), false)
	alive(b, p)
}

// runUDPFlowsProcess is the new-UDP-flow client's process: target,
// duration, comma-separated source addresses; it prints the result.
func runUDPFlowsProcess(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("want target duration sources, got %q", args)
	}
	target, err := netip.ParseAddrPort(args[0])
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(args[1])
	if err != nil {
		return err
	}
	var sources []netip.Addr
	for _, s := range strings.Split(args[2], ",") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return err
		}
		sources = append(sources, a)
	}
	res, err := RunUDPFlows(context.Background(), UDPFlowsOptions{
		Target: target, Sources: sources, PortLo: udpFlowPortLo, PortHi: udpFlowPortHi,
		Workers: udpFlowWorkers, Duration: d, Payload: udpPayload, Timeout: udpFlowTimeout,
	})
	if err != nil {
		return err
	}
	fmt.Println(res)
	return nil
}

// kproxyArgs are the flags kproxy runs with for path p on the services in
// file. portals says whether the binary has --userspace-portals (older
// ones have REDIRECT portals only).
func kproxyArgs(p Path, file string, portals bool) []string {
	args := []string{"--services-file=" + file, "--hostname-override=node", "--iptables-min-sync-period=0",
		"--iptables-sync-period=1h", "--conntrack-max-per-core=0", "-v=1"}
	switch p {
	case KproxyIPTables:
		return append(args, "--proxy-mode=iptables")
	case KproxyNFTables:
		return append(args, "--proxy-mode=nftables")
	}
	// Binaries from before local portals take REDIRECT portals only, and
	// without the flag.
	if portals || p != Kproxy {
		args = append(args, "--userspace-portals="+portalKind(p))
	}
	return append(args, "--proxy-mode=userspace")
}

// hasPortalsFlag reports whether the kproxy binary has --userspace-portals.
func hasPortalsFlag(bin string) bool { return kproxyHelpMentions(bin, "--userspace-portals") }

// hasSKLookupPortals reports whether the kproxy binary offers socket-lookup
// portals (--userspace-portals=sklookup).
func hasSKLookupPortals(bin string) bool { return kproxyHelpMentions(bin, "'sklookup'") }

func kproxyHelpMentions(bin, text string) bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return bytes.Contains(out, []byte(text))
}

// raiseNoFileQuietly raises RLIMIT_NOFILE as far as this process may and
// returns the soft limit the children inherit.
func raiseNoFileQuietly() int {
	lim := syscall.Rlimit{Cur: noFileLimit, Max: noFileLimit}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return int(lim.Cur)
}

// waitSynced waits for kproxy's first finished sync (its /metrics, in the
// node's namespace, which is this process's).
func waitSynced(b *testing.B, kp *lab.Process, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-kp.Exited():
			b.Fatalf("kproxy exited before its first sync: %v\n%s", kp.Err(), kp.Log())
		default:
		}
		if v, ok := lab.Metric(lab.SyncCountMetric); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 1 {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("kproxy did not finish a sync within %v\n%s", timeout, kp.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settle waits (up to 10 s) until kproxy uses under a tenth of a core, so
// what its start-up left running (a garbage collection, the rest of a
// sync) does not land in the first run.
func settle(kp *lab.Process) {
	for range 20 {
		before, err := procCPU(kp.Pid())
		if err != nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
		after, err := procCPU(kp.Pid())
		if err != nil || after.Total()-before.Total() < 50*time.Millisecond {
			return
		}
	}
}

// countRules counts the node's iptables rules, every table.
func countRules(h *lab.Host) int {
	out, err := h.Exec("iptables-save")
	if err != nil {
		return -1
	}
	n := 0
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "-A ") {
			n++
		}
	}
	return n
}

// countNFTRules counts the rules of the node's nftables ruleset: the
// lines one level into a chain's block, other than its type, policy and
// comment (deeper lines continue a rule).
func countNFTRules(h *lab.Host) int {
	out, err := h.Exec("nft", "list", "ruleset")
	if err != nil {
		return -1
	}
	return nftRuleLines(out)
}

func nftRuleLines(ruleset string) int {
	n, inChain := 0, false
	for line := range strings.Lines(ruleset) {
		trimmed := strings.TrimSpace(line)
		switch depth := len(line) - len(strings.TrimLeft(line, "\t")); {
		case depth == 1 && strings.HasPrefix(trimmed, "chain "):
			inChain = true
		case depth == 1 && trimmed == "}":
			inChain = false
		case inChain && depth == 2 && trimmed != "" && trimmed != "}" &&
			!strings.HasPrefix(trimmed, "type ") && !strings.HasPrefix(trimmed, "policy ") && !strings.HasPrefix(trimmed, "comment "):
			n++
		}
	}
	return n
}

// servicesRulePosition is the place (from 1) of vip's first rule among the
// nat KUBE-SERVICES rules, 0 without one: how many rules a new flow to the
// measured service is matched against.
func servicesRulePosition(h *lab.Host, vip netip.Addr) int {
	out, err := h.Exec("iptables-save", "-t", "nat")
	if err != nil {
		return 0
	}
	n := 0
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "-A KUBE-SERVICES ") {
			n++
			if strings.Contains(line, " -d "+vip.String()+"/32 ") {
				return n
			}
		}
	}
	return 0
}

// kproxyRoutes lists the node's local routes of kproxy's protocol (107).
func kproxyRoutes(b *testing.B, h *lab.Host) []string {
	b.Helper()
	out, err := h.Exec("ip", "route", "show", "table", "local", "proto", "107")
	if err != nil {
		b.Fatalf("listing kproxy's local routes: %v\n%s", err, out)
	}
	var routes []string
	for line := range strings.Lines(out) {
		if l := strings.TrimSpace(line); l != "" {
			routes = append(routes, l)
		}
	}
	return routes
}

func flushKproxyRoutes(b *testing.B, h *lab.Host) {
	b.Helper()
	if out, err := h.Exec("ip", "route", "flush", "table", "local", "proto", "107"); err != nil {
		b.Fatalf("removing kproxy's local routes: %v\n%s", err, out)
	}
	if left := kproxyRoutes(b, h); len(left) > 0 {
		b.Fatalf("kproxy's local routes remain after a flush: %q", left)
	}
}

// clipLog keeps a log's first lines and its end.
func clipLog(log string) string {
	if len(log) <= 6000 {
		return log
	}
	return log[:3000] + "\n…\n" + log[len(log)-3000:]
}
