package modes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	"github.com/moby/ipvs"
	discovery "k8s.io/api/discovery/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/syncscale"
)

// The guest half of the guest section: in the guest kernel, in a DataLab,
// each size's DNAT reference, kproxy's IPVS mode and kube-proxy's IPVS
// proxier (ipvsref), one after the other, the state cleaned in between.

// guestNodeName is the node both proxies run as.
const guestNodeName = "node"

// How many one-endpoint changes and new services a kproxy cell times.
const (
	guestChanges     = 3
	guestNewServices = 2
)

// guestModes are the guest section's modes, in measuring order.
func guestModes() []string { return []string{ModeDNAT, ModeKproxyIPVS, ModeKubeProxyIPVS} }

// ipvsrefMissing is why kube-proxy's IPVS cells have no change or new-service figures.
const ipvsrefMissing = "ipvsref runs kube-proxy's proxier for one sync only"

// guestLab measures the guest section's cells in a DataLab.
type guestLab struct {
	tb       testing.TB
	d        *DataLab
	settings guestSettings
	// kproxy and ipvsref are the binaries; ipvsref is "" when it is not
	// built (its cells are skipped, saying so).
	kproxy, ipvsref string
	// dir holds the services files.
	dir      string
	progress func(string)
}

// guestSection measures every size and mode and returns the section.
// A mode that fails gets a cell saying why (and fails tb); the others are
// still measured.
func (g *guestLab) guestSection(ctx context.Context) Section {
	s := Section{
		Name:      SectionGuest,
		Title:     guestTitle(),
		Reference: ModeDNAT,
		Notes:     guestNotes(g.settings),
	}
	for _, n := range g.settings.Sizes {
		for _, mode := range guestModes() {
			start := time.Now()
			g.progress(fmt.Sprintf("%d services: %s…", n, mode))
			c, err := g.cell(ctx, mode, n)
			if err != nil {
				g.tb.Errorf("guest section, %s at %d services: %v", mode, n, err)
				c = Cell{Mode: mode, Services: n, Skipped: "failed: " + firstLine(err.Error())}
			}
			if err := g.cleanUp(); err != nil {
				// Later cells would measure the leftovers.
				g.tb.Fatalf("guest section, after %s at %d services: %v", mode, n, err)
			}
			s.Cells = append(s.Cells, c)
			g.progress(fmt.Sprintf("%d services: %s done in %v: %s", n, mode, time.Since(start).Round(100*time.Millisecond), cellSummary(c)))
		}
	}
	return s
}

func (g *guestLab) cell(ctx context.Context, mode string, n int) (Cell, error) {
	switch mode {
	case ModeDNAT:
		return g.dnatCell(ctx, n)
	case ModeKproxyIPVS:
		return g.kproxyCell(ctx, n)
	case ModeKubeProxyIPVS:
		if g.ipvsref == "" {
			return Cell{Mode: mode, Services: n, Skipped: "ipvsref is not built (make tools)"}, nil
		}
		return g.kubeProxyCell(ctx, n)
	}
	return Cell{}, fmt.Errorf("no guest mode %q", mode)
}

func (g *guestLab) dnatCell(ctx context.Context, n int) (Cell, error) {
	remove, err := g.d.InstallDNAT(BenchVIP)
	if err != nil {
		return Cell{}, err
	}
	data, err := g.measureData(ctx, nil)
	if err := errors.Join(err, remove()); err != nil {
		return Cell{}, err
	}
	return Cell{Mode: ModeDNAT, Services: n, Data: data}, nil
}

// measureData measures the data plane through BenchVIP; when a workload
// fails, the error also says what the node held for the VIP then
// (dataPlaneState), in lines after the first, and so does progress (the
// end of the guest's output that a failed run shows may not reach it).
func (g *guestLab) measureData(ctx context.Context, alive func() error) (map[string]Workload, error) {
	data, err := g.d.MeasureData(ctx, BenchVIP, g.settings.RunFor, g.settings.Repeats, alive)
	if err != nil {
		state := g.d.dataPlaneState(ctx, BenchVIP)
		g.progress(fmt.Sprintf("a workload through %s failed (%s); the node then:", BenchVIP, firstLine(err.Error())))
		for _, line := range strings.Split(state, "\n") {
			g.progress("  " + line)
		}
		return nil, fmt.Errorf("%w\n%s", err, state)
	}
	return data, nil
}

// syncBound bounds a first sync at n services in the guest: generous, it
// only keeps a wedged proxy from hanging the run (kube-proxy's IPVS
// proxier took 106 s for its first sync of 1,000 services there).
func syncBound(n int) time.Duration { return 5*time.Minute + time.Duration(n)*400*time.Millisecond }

// kproxyCell runs kproxy --proxy-mode=ipvs on a services file of n
// services: its first sync, CPU and RSS then, the data plane, one-endpoint
// changes and new services, all while it keeps running.
func (g *guestLab) kproxyCell(ctx context.Context, n int) (Cell, error) {
	services := servicesWithPadding(n-1, g.d.Endpoints)
	file := filepath.Join(g.dir, fmt.Sprintf("kproxy-%d.yaml", n))
	if err := g.writeServices(file, services); err != nil {
		return Cell{}, err
	}
	start := time.Now()
	kp := g.d.Topo.Node.StartFor(g.tb, g.kproxy, "--proxy-mode=ipvs", "--services-file="+file,
		"--hostname-override="+guestNodeName, "--conntrack-max-per-core=0", "--ipvs-min-sync-period=0")
	defer func() {
		if err := syncscale.StopGroup(kp, g.tb.Logf); err != nil {
			g.tb.Logf("stopping kproxy: %v", err)
		}
	}()
	alive := func() error {
		select {
		case <-kp.Exited():
			return fmt.Errorf("kproxy exited (%v); its log:\n%s", kp.Err(), logTail(kp.Log()))
		default:
			return nil
		}
	}
	if err := waitSynced(ctx, alive, syncBound(n)); err != nil {
		return Cell{}, fmt.Errorf("kproxy's first sync: %w", err)
	}
	ctl := &Control{FirstSync: time.Since(start).Seconds()}
	rss, _, err := syncscale.ReadRSS(kp.Pid())
	if err != nil {
		return Cell{}, err
	}
	cpu, err := syncscale.ReadCPU(kp.Pid())
	if err != nil {
		return Cell{}, err
	}
	ctl.RSS, ctl.CPU = rss, (cpu.Self + cpu.Children).Seconds()
	g.progress(fmt.Sprintf("%d services: kproxy-ipvs first sync %.2f s, CPU %.2f s, RSS %.1f MiB", n, ctl.FirstSync, ctl.CPU, float64(rss)/(1<<20)))

	data, err := g.measureData(ctx, alive)
	if err != nil {
		return Cell{}, err
	}

	h, err := ipvs.New("")
	if err != nil {
		return Cell{}, fmt.Errorf("opening IPVS over netlink: %w", err)
	}
	defer h.Close()
	// The change goes to a bulk service in the middle, as the host's does;
	// with no other service, to the measured one (its data are taken).
	changed := len(services) - 1
	if n > 1 {
		changed = syncscale.ChangedService(n - 1)
	}
	for k := range guestChanges {
		ep := netip.AddrFrom4([4]byte{198, 19, 255, byte(1 + k)})
		svc := services[changed].svc
		slice := services[changed].slice.DeepCopy()
		ready := true
		slice.Endpoints = append(slice.Endpoints, discovery.Endpoint{Addresses: []string{ep.String()}, Conditions: discovery.EndpointConditions{Ready: &ready}})
		services[changed].slice = slice
		if err := waitQuiet(ctx, alive, syncBound(n)); err != nil {
			return Cell{}, fmt.Errorf("before one-endpoint change %d: %w", k+1, err)
		}
		if err := g.writeServices(file, services); err != nil {
			return Cell{}, err
		}
		t0 := time.Now()
		vs := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), uint16(svc.Spec.Ports[0].Port))
		rs := netip.AddrPortFrom(ep, uint16(*slice.Ports[0].Port))
		if err := waitIPVS(ctx, h, alive, vs, rs, syncBound(n)); err != nil {
			return Cell{}, fmt.Errorf("one-endpoint change %d: %w", k+1, err)
		}
		ctl.ChangeAll = append(ctl.ChangeAll, time.Since(t0).Seconds())
	}
	ctl.Change = benchtable.Median(ctl.ChangeAll)
	// New services as the host benchmark times them: syncscale's
	// network-programming services, answered by its answer server on
	// backend-2, probed until the client reads the answer.
	answers, err := syncscale.ServeAnswers(g.d.Spare, syncscale.EndpointPort)
	if err != nil {
		return Cell{}, err
	}
	defer answers.Close()
	removeReject, err := g.rejectUnprogrammed()
	if err != nil {
		return Cell{}, err
	}
	defer func() {
		if err := removeReject(); err != nil {
			g.tb.Errorf("%v", err)
		}
	}()
	for k := range guestNewServices {
		name, vip := syncscale.NPLServiceName(k), syncscale.NPLServiceIP(k)
		services = append(services, serviceObjects{syncscale.NewService(name, vip), syncscale.NewSlice(name, []netip.Addr{g.d.Spare.IPv4})})
		if err := waitQuiet(ctx, alive, syncBound(n)); err != nil {
			return Cell{}, fmt.Errorf("before new service %d: %w", k+1, err)
		}
		if err := g.writeServices(file, services); err != nil {
			return Cell{}, err
		}
		t0 := time.Now()
		answered, err := syncscale.WaitAnswer(ctx, g.d.Topo.Client, netip.AddrPortFrom(vip, syncscale.ServicePort), t0.Add(syncBound(n)))
		if err != nil {
			return Cell{}, fmt.Errorf("new service %d: %w", k+1, errors.Join(err, alive()))
		}
		ctl.NewServiceAll = append(ctl.NewServiceAll, answered.Sub(t0).Seconds())
	}
	ctl.NewService = benchtable.Median(ctl.NewServiceAll)
	if err := alive(); err != nil {
		return Cell{}, err
	}
	return Cell{Mode: ModeKproxyIPVS, Services: n, Control: ctl, Data: data}, nil
}

// kubeProxyCell runs kube-proxy's IPVS proxier (ipvsref) once on a
// services file of n services and measures the data plane it leaves.
func (g *guestLab) kubeProxyCell(ctx context.Context, n int) (Cell, error) {
	file := filepath.Join(g.dir, fmt.Sprintf("kube-proxy-%d.yaml", n))
	if err := g.writeServices(file, servicesWithPadding(n-1, g.d.Endpoints)); err != nil {
		return Cell{}, err
	}
	pathDir, err := legacyIPTablesDir(g.tb.TempDir())
	if err != nil {
		return Cell{}, err
	}
	ctx2, cancel := context.WithTimeout(ctx, syncBound(n))
	defer cancel()
	// iptables, ip6tables and their -save/-restore resolve to the legacy
	// backend through PATH, as the kube-proxy image's wrapper would pick it
	// on this kernel (see bench/ipvsref).
	cmd := exec.CommandContext(ctx2, g.ipvsref, "-services-file", file, "-hostname-override", guestNodeName, "-v", "0")
	cmd.Env = append(os.Environ(), "PATH="+pathDir+":"+os.Getenv("PATH"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return Cell{}, fmt.Errorf("kube-proxy's IPVS proxier (ipvsref) after %v: %w\n%s", took.Round(time.Millisecond), err, logTail(string(out)))
	}
	ctl := &Control{
		FirstSync: took.Seconds(),
		// wait4's usage: the process's and its waited-for children's
		// (iptables-restore, ipset); the RSS is its peak, as it has exited.
		CPU: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds(),
		Missing: map[string]string{
			"change":     ipvsrefMissing,
			"newService": ipvsrefMissing,
		},
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		ctl.RSS = ru.Maxrss << 10 // kB
	}
	g.progress(fmt.Sprintf("%d services: kube-proxy-ipvs sync (the whole ipvsref run) %.2f s, CPU %.2f s, peak RSS %.1f MiB", n, ctl.FirstSync, ctl.CPU, float64(ctl.RSS)/(1<<20)))
	data, err := g.measureData(ctx, nil)
	if err != nil {
		return Cell{}, err
	}
	return Cell{Mode: ModeKubeProxyIPVS, Services: n, Control: ctl, Data: data}, nil
}

// writeServices replaces the services file whole (a rename), so the
// proxy's file watch never reads half of it.
func (g *guestLab) writeServices(path string, services []serviceObjects) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(servicesFile(guestNodeName, g.d.Topo.Node.IPv4, services)), 0o644); err != nil {
		return fmt.Errorf("writing the services file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replacing the services file: %w", err)
	}
	return nil
}

// rejectUnprogrammed makes a probe of a ClusterIP no proxy has programmed
// yet fail at once with a reset, so the probe's retries, not lost SYNs'
// timeouts, set the new-service resolution: syncscale.PrepareNode's nftables
// rule, in iptables-legacy (the guest kernel has no nftables ip family).
// A packet to a programmed ClusterIP is delivered locally (IPVS) and never
// forwarded with that destination.
func (g *guestLab) rejectUnprogrammed() (remove func() error, err error) {
	rule := []string{"FORWARD", "-d", "198.18.0.0/16", "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"}
	if _, err := g.d.Topo.Node.Exec(iptablesCommand(), append([]string{"-w", "-t", "filter", "-I"}, rule...)...); err != nil {
		return nil, fmt.Errorf("rejecting unprogrammed ClusterIPs: %w", err)
	}
	return func() error {
		if _, err := g.d.Topo.Node.Exec(iptablesCommand(), append([]string{"-w", "-t", "filter", "-D"}, rule...)...); err != nil {
			return fmt.Errorf("removing the rule rejecting unprogrammed ClusterIPs: %w", err)
		}
		return nil
	}, nil
}

// cleanUp removes whatever the last mode left: kproxy --cleanup removes
// what kproxy's and kube-proxy's modes install (IPVS virtual servers,
// kube-ipvs0, ipsets, KUBE-* chains); it then checks that no virtual
// server is left.
func (g *guestLab) cleanUp() error {
	if out, err := g.d.Topo.Node.Exec(g.kproxy, "--cleanup"); err != nil {
		return fmt.Errorf("kproxy --cleanup: %w\n%s", err, logTail(out))
	}
	h, err := ipvs.New("")
	if err != nil {
		return fmt.Errorf("opening IPVS over netlink: %w", err)
	}
	defer h.Close()
	left, err := h.GetServices()
	if err != nil {
		return fmt.Errorf("listing IPVS virtual servers after the cleanup: %w", err)
	}
	if len(left) > 0 {
		return fmt.Errorf("%d IPVS virtual servers left after kproxy --cleanup (the first: %s:%d)", len(left), left[0].Address, left[0].Port)
	}
	return waitNoIPVSConns(BenchVIP, ipvsConnsBound)
}

// ipvsConnsBound bounds the wait for IPVS's connection entries of a
// deleted service to go: with expire_nodest_conn=1 (both proxies set it)
// the kernel drops them in a work queued when the real servers are
// deleted, about a second later.
const ipvsConnsBound = time.Minute

// waitNoIPVSConns waits until IPVS holds no connection entry to vip. An
// entry left by one cell (TIME_WAIT lasts 2 minutes in IPVS) would meet
// the next cell's new connections from a reused client port and could
// drop their SYNs (ip_vs_in_hook's conn_reuse_mode and unavailable real
// server paths): the cells must not measure each other's leftovers.
func waitNoIPVSConns(vip netip.Addr, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		table, err := os.ReadFile("/proc/net/ip_vs_conn")
		if errors.Is(err, os.ErrNotExist) {
			return nil // IPVS not loaded: no entries
		}
		if err != nil {
			return fmt.Errorf("reading IPVS's connections: %w", err)
		}
		n, left := summarizeIPVSConns(string(table), vip)
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("IPVS still holds connections to %s %v after the cleanup: %s", vip, bound, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metricsPoll is how often kproxy's sync count is read, ipvsPoll how often
// IPVS is listed: often enough for the figures, rarely enough not to slow
// the proxy on the guest's one CPU.
const (
	metricsPoll = 50 * time.Millisecond
	ipvsPoll    = 10 * time.Millisecond
	// quietFor is how long the sync count must stand still before a
	// change is written, so no earlier sync's tail is timed with it.
	quietFor = 500 * time.Millisecond
)

// waitSynced waits until kproxy (in this namespace) has finished a sync.
func waitSynced(ctx context.Context, alive func() error, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	last := "(no metrics yet)"
	for {
		if err := alive(); err != nil {
			return err
		}
		if v, ok := lab.Metric(lab.SyncCountMetric); ok {
			last = v
			var n int
			if _, err := fmt.Sscan(v, &n); err == nil && n >= 1 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no sync after %v (%s: %s)", bound, lab.SyncCountMetric, last)
		}
		if err := sleepCtx(ctx, metricsPoll); err != nil {
			return err
		}
	}
}

// waitQuiet waits until kproxy's sync count has not moved for quietFor.
func waitQuiet(ctx context.Context, alive func() error, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	last, since := "", time.Now()
	for {
		if err := alive(); err != nil {
			return err
		}
		v, ok := lab.Metric(lab.SyncCountMetric)
		if !ok {
			return fmt.Errorf("kproxy's %s is not in %s", lab.SyncCountMetric, lab.KproxyMetricsURL)
		}
		if v != last {
			last, since = v, time.Now()
		} else if time.Since(since) >= quietFor {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kproxy still syncing (%s syncs so far) after %v", last, bound)
		}
		if err := sleepCtx(ctx, metricsPoll); err != nil {
			return err
		}
	}
}

// ipvsTCP is the IPVS service of a TCP address.
func ipvsTCP(vs netip.AddrPort) *ipvs.Service {
	return &ipvs.Service{Address: net.IP(vs.Addr().AsSlice()), Port: vs.Port(), Protocol: syscall.IPPROTO_TCP, AddressFamily: syscall.AF_INET}
}

// waitIPVS waits until the TCP virtual server vs has the real server rs.
func waitIPVS(ctx context.Context, h *ipvs.Handle, alive func() error, vs, rs netip.AddrPort, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		dests, err := h.GetDestinations(ipvsTCP(vs))
		if err == nil {
			for _, d := range dests {
				if a, ok := netip.AddrFromSlice(d.Address); ok && netip.AddrPortFrom(a.Unmap(), d.Port) == rs {
					return nil
				}
			}
		}
		if err := alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("real server %s of %s not in IPVS after %v (last listing: %d real servers, %v)", rs, vs, bound, len(dests), err)
		}
		if err := sleepCtx(ctx, ipvsPoll); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// legacyIPTablesDir links the legacy iptables multi-call binary under the
// plain names (iptables, ip6tables and their -save and -restore) in dir.
func legacyIPTablesDir(dir string) (string, error) {
	legacy, err := exec.LookPath("iptables-legacy")
	if err != nil {
		return "", fmt.Errorf("iptables-legacy: %w", err)
	}
	multi, err := filepath.EvalSymlinks(legacy)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", legacy, err)
	}
	for _, family := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			if err := os.Symlink(multi, filepath.Join(dir, family+suffix)); err != nil {
				return "", fmt.Errorf("linking the legacy iptables: %w", err)
			}
		}
	}
	return dir, nil
}

// guestTitle names the guest kernel.
func guestTitle() string {
	release := "unknown release"
	var u syscall.Utsname
	if err := syscall.Uname(&u); err == nil {
		var b strings.Builder
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b.WriteByte(byte(c))
		}
		release = b.String()
	}
	return fmt.Sprintf("IPVS modes in the user-mode-linux guest kernel (Linux %s, one CPU): ratios to DNAT in the guest only", release)
}

// guestNotes say what the section measured and what it could not.
func guestNotes(s guestSettings) []string {
	return []string{
		"The guest kernel's system calls are ~60× slower than the host's and it has one CPU: absolute rates and latencies say nothing about a real node; only ratios to the DNAT reference measured in the same guest do.",
		fmt.Sprintf("Data plane: each workload %d run(s) of %v through the measured service's ClusterIP (%d endpoints on one backend); DNAT is hand-written iptables-legacy nat PREROUTING rules taking the endpoints in turn (the same at every size: no other service has rules), the IPVS modes balance over the same endpoints.", s.Repeats, s.RunFor, syncscale.EndpointsPerSlice),
		"kproxy-ipvs reads a services file (--services-file), not an API server: its one-endpoint change (until the real server is in IPVS) and new-service (syncscale's probe: until the client reads the answer server's greeting through it) latencies include re-reading the whole file and the file watch's 100 ms debounce.",
		"kube-proxy-ipvs is kube-proxy v1.36's IPVS proxier run by bench/tools/ipvsref for one sync on the same services file: its first sync is the whole run (process start to exit), its CPU its own and its children's, its RSS the peak; it has no change or new-service figures (" + ipvsrefMissing + ").",
	}
}

// cellSummary is a cell in a few words, for progress.
func cellSummary(c Cell) string {
	if c.Skipped != "" {
		return "skipped: " + c.Skipped
	}
	var parts []string
	if c.Control != nil {
		parts = append(parts, fmt.Sprintf("first sync %.2f s", c.Control.FirstSync))
		if c.Control.Change > 0 {
			parts = append(parts, fmt.Sprintf("change %.3f s, new service %.3f s", c.Control.Change, c.Control.NewService))
		}
	}
	for _, w := range Workloads() {
		if d, ok := c.Data[w]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f/s", w, d.Rate))
		}
	}
	return strings.Join(parts, ", ")
}

// firstLine is s up to its first newline, cut to 300 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// logTail is the end of a log, for errors.
func logTail(log string) string {
	if len(log) > 4000 {
		log = "…" + log[len(log)-4000:]
	}
	return log
}
