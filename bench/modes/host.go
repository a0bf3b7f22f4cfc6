package modes

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/modes/load"
	"kproxy.dev/kproxy/bench/syncscale"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// minSyncPeriod is kube-proxy's default --iptables-min-sync-period, given
// to every proxy.
const minSyncPeriod = time.Second

// Binaries are the proxies the host section runs.
type Binaries struct{ Kproxy, KubeProxy string }

// sizeLab is one size of the host section: a fresh network namespace (the
// node), a real kube-apiserver holding the services, the data lab.
type sizeLab struct {
	tb       testing.TB
	cfg      Config
	size     int
	bins     Binaries
	api      *lab.APIServer
	dl       *DataLab
	progress *Progress
	plan     Plan
	// noFile is the descriptor limit every proxy inherits.
	noFile int
}

// MeasureSize measures every mode of cfg at one size; it must run inside
// lab.InFreshNetns. A mode that fails is reported through tb and its cell
// says why; the other modes are still measured.
func MeasureSize(tb testing.TB, cfg Config, size int, bins Binaries, progress *Progress) []Cell {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &sizeLab{tb: tb, cfg: cfg, size: size, bins: bins, progress: progress, plan: newPlan(cfg), noFile: raiseNoFile()}
	s.setUp(ctx)

	// The reference is measured before and after the modes and its runs
	// pooled, so a machine that got busier or quieter meanwhile shows as
	// noise in its rates instead of skewing every ratio.
	reference := s.measureDNAT(ctx, "before the modes")
	var cells []Cell
	order := runOrder(cfg.Modes)
	for i, id := range order {
		progress.Printf("%s services: %s (%d/%d)", benchtable.Thousands(size), id, i+1, len(order))
		cells = append(cells, s.measureMode(ctx, id, i))
		progress.Step(s.plan.CellCost(id, size))
	}
	for w, runs := range s.measureDNAT(ctx, "after the modes") {
		reference[w] = append(reference[w], runs...)
	}
	cells = append(cells, Cell{Mode: ModeDNAT, Services: size, Data: SummarizeRuns(reference)})
	// Table order.
	slices.SortStableFunc(cells, func(a, b Cell) int { return modeRank(a.Mode) - modeRank(b.Mode) })
	return cells
}

func modeRank(id string) int {
	if id == ModeDNAT {
		return -1
	}
	return slices.Index(HostModes(), id)
}

// setUp builds the lab, the API server and its objects: size bulk
// services (bench/syncscale's, 10 endpoints that exist nowhere) and the
// measured service, whose endpoints are real.
func (s *sizeLab) setUp(ctx context.Context) {
	tb := s.tb
	began := time.Now()
	s.api = lab.StartAPIServer(tb)
	s.dl = NewDataLab(tb, s.cfg.Endpoints)
	node := s.dl.Topo.Node
	lab.CreateNode(tb, s.api.Client, syncscale.NodeName, node.IPv4.String())
	if err := syncscale.PrepareNode(node); err != nil {
		tb.Fatal(err)
	}
	ln, err := syncscale.ServeAnswers(s.dl.Spare, syncscale.EndpointPort)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })

	bulk, err := syncscale.BulkClient(s.api.Config)
	if err != nil {
		tb.Fatal(err)
	}
	took, err := syncscale.CreateBulk(ctx, bulk, s.size)
	if err != nil {
		tb.Fatal(err)
	}
	svc, slice := BenchService(s.dl.Endpoints)
	if _, err := s.api.Client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("creating the measured service: %v", err)
	}
	if _, err := s.api.Client.DiscoveryV1().EndpointSlices(slice.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("creating the measured service's endpoint slice: %v", err)
	}
	s.progress.Step(estSizeSetUp + time.Duration(s.size)*estPerObject)
	s.progress.Printf("%s services: lab ready in %v (objects created in %v)", benchtable.Thousands(s.size), time.Since(began).Round(100*time.Millisecond), took.Round(100*time.Millisecond))
}

// measureDNAT measures the reference, a hand-written DNAT rule with no
// proxy running, and returns its runs.
func (s *sizeLab) measureDNAT(ctx context.Context, when string) map[string][]load.Result {
	s.progress.Printf("%s services: the DNAT reference, %s", benchtable.Thousands(s.size), when)
	s.flushConntrack()
	remove, err := s.dl.InstallDNAT(BenchVIP)
	if err != nil {
		s.tb.Fatal(err)
	}
	runs, err := s.dl.MeasureRuns(ctx, BenchVIP, s.cfg.RunFor(), s.cfg.Repeats, nil)
	if rerr := remove(); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		s.tb.Fatalf("the DNAT reference at %d services, %s: %v", s.size, when, err)
	}
	s.progress.Step(s.plan.dataCost())
	return runs
}

// measureMode runs one mode's proxy through the control-plane
// measurements (bench/syncscale's) and, while it still runs, the data
// plane; then removes what it left.
func (s *sizeLab) measureMode(ctx context.Context, id string, index int) Cell {
	cell := Cell{Mode: id, Services: s.size}
	m, err := hostModeOf(id)
	if err != nil {
		s.tb.Fatal(err)
	}
	if cell.Skipped = skipReason(m, s.size, s.noFile, runtime.GOMAXPROCS(0)); cell.Skipped != "" {
		s.progress.Printf("%s services: %s skipped: %s", benchtable.Thousands(s.size), id, cell.Skipped)
		return cell
	}
	node := s.dl.Topo.Node
	s.flushConntrack()
	if b, ok := m.Mode.Backend(); ok && m.Proxy == syncscale.Kproxy {
		if err := syncscale.MarkBackend(ctx, b); err != nil {
			s.tb.Fatal(err)
		}
	}
	start, budget, err := s.starter(ctx, m)
	if err != nil {
		s.tb.Fatal(err)
	}
	nplBase := index * s.cfg.NewServiceRepeats
	rl := &syncscale.RowLab{
		Spec: syncscale.RowSpec{Mode: m.Mode, Services: s.size},
		Settings: syncscale.Settings{KproxyBudget: s.cfg.KproxyBudget, KubeProxyBudget: s.cfg.KubeProxyBudget,
			MinSyncPeriod: minSyncPeriod, NPLRepeats: s.cfg.NewServiceRepeats, LogDir: s.cfg.LogDir},
		Client: s.api.Client, ClientHost: s.dl.Topo.Client, Server: s.dl.Spare.IPv4,
		Logf: func(format string, args ...any) {
			s.progress.Printf("%s services: %s: %s", benchtable.Thousands(s.size), id, fmt.Sprintf(format, args...))
		},
		Then: func(ctx context.Context, proc *lab.Process) error {
			s.progress.Printf("%s services: %s: data plane", benchtable.Thousands(s.size), id)
			var err error
			cell.Data, err = s.dl.MeasureData(ctx, BenchVIP, s.cfg.RunFor(), s.cfg.Repeats, func() error { return processAlive(proc) })
			return err
		},
	}
	measured, err := rl.Measure(ctx, m.Proxy, budget, nplBase, start)
	switch {
	case err != nil:
		s.tb.Errorf("%s at %d services: %v", id, s.size, err)
		cell.Skipped, cell.Data = "failed: "+firstLine(err.Error()), nil
	case measured.OverBudget:
		cell.Skipped = fmt.Sprintf("first full sync still running after the %v budget", budget)
	default:
		cell.Control = controlOf(measured)
	}
	if err := rl.ResetAPI(ctx, nplBase); err != nil {
		s.tb.Fatal(err)
	}
	if err := syncscale.CleanAfter(ctx, node, s.bins.Kproxy, m.Mode); err != nil {
		s.tb.Fatalf("after %s: %v", id, err)
	}
	s.resetIPTables(ctx)
	s.removeLocalRoutes()
	return cell
}

// resetIPTables empties both iptables backends' tables after a cell's
// `kproxy --cleanup` has been checked: chains a proxy leaves for kubelet
// (KUBE-KUBELET-CANARY, KUBE-FIREWALL, …) and the backend mark would
// steer the next kproxy's choice of backend, which a fresh node would not.
func (s *sizeLab) resetIPTables(ctx context.Context) {
	for _, b := range kernel.Backends() {
		for _, family := range []ipfamily.Family{ipfamily.IPv4, ipfamily.IPv6} {
			s.resetBackend(ctx, b.Command(family))
		}
	}
}

func (s *sizeLab) resetBackend(ctx context.Context, iptables string) {
	for _, table := range []string{"raw", "mangle", "nat", "filter"} {
		for _, op := range []string{"-F", "-X"} {
			cmd := exec.CommandContext(ctx, iptables, "-w", "5", "-t", table, op)
			if out, err := cmd.CombinedOutput(); err != nil {
				s.tb.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
			}
		}
	}
}

// starter returns how to start mode m's proxy and its first-sync budget.
func (s *sizeLab) starter(ctx context.Context, m hostMode) (func() *lab.Process, time.Duration, error) {
	flags := syncscale.ProxyFlags(s.api.KubeconfigPath, m.Mode, minSyncPeriod)
	node := s.dl.Topo.Node
	if m.Proxy == syncscale.Kproxy {
		return func() *lab.Process { return node.StartFor(s.tb, s.bins.Kproxy, flags...) }, s.cfg.KproxyBudget, nil
	}
	bin := s.bins.KubeProxy
	if b, ok := m.Mode.Backend(); ok {
		// kube-proxy's iptables mode runs the iptables its PATH finds.
		var err error
		if bin, err = syncscale.KubeProxyLauncher(ctx, s.tb.TempDir(), s.bins.KubeProxy, b); err != nil {
			return nil, 0, err
		}
	}
	return func() *lab.Process { return node.StartFor(s.tb, bin, flags...) }, s.cfg.KubeProxyBudget, nil
}

// flushConntrack forgets the previous cell's flows, so no packet of this
// one follows a translation the last proxy set up.
func (s *sizeLab) flushConntrack() {
	if out, err := s.dl.Topo.Node.Exec("conntrack", "-F"); err != nil {
		s.tb.Fatalf("conntrack -F: %v\n%s", err, out)
	}
}

// removeLocalRoutes checks that the local-portal mode's routes (protocol
// 107) went with `kproxy --cleanup`.
func (s *sizeLab) removeLocalRoutes() {
	out, err := s.dl.Topo.Node.Exec("ip", "route", "show", "table", "local", "proto", "107")
	if err != nil {
		s.tb.Fatalf("listing kproxy's local routes: %v\n%s", err, out)
	}
	if strings.TrimSpace(out) != "" {
		s.tb.Errorf("kproxy --cleanup left local routes:\n%s", out)
		s.dl.Topo.Node.MustExec("ip", "route", "flush", "table", "local", "proto", "107")
	}
}

// controlOf converts bench/syncscale's measurement to the results' form.
func controlOf(m syncscale.Measured) *Control {
	c := &Control{
		FirstSync: m.FullSync.Seconds(),
		Change:    m.Change.Seconds(),
		ChangeAll: []float64{m.Change.Seconds()},
		CPU:       (m.CPU.Self + m.CPU.Children).Seconds(),
		RSS:       m.RSS,
	}
	for _, d := range m.NPL {
		c.NewServiceAll = append(c.NewServiceAll, d.Seconds())
	}
	c.NewService = m.NPLMedian().Seconds()
	return c
}

func processAlive(proc *lab.Process) error {
	select {
	case <-proc.Exited():
		log := proc.Log()
		if len(log) > 4000 {
			log = "…" + log[len(log)-4000:]
		}
		return fmt.Errorf("%s exited (%v); its log:\n%s", proc, proc.Err(), log)
	default:
		return nil
	}
}

// raiseNoFile raises RLIMIT_NOFILE's soft limit to its hard limit (all
// that may be had without CAP_SYS_RESOURCE) and returns it: the proxies
// inherit it.
func raiseNoFile() int {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	return int(lim.Cur)
}

// writeCells and readCells carry a size's cells from its namespace's
// process to the parent.
func writeCells(dir string, size int, cells []Cell) error {
	return WriteRun(cellsPath(dir, size), Run{Version: SchemaVersion, Sections: []Section{{Name: SectionHost, Cells: cells}}})
}

func readCells(dir string, size int) ([]Cell, error) {
	r, err := ReadRun(cellsPath(dir, size))
	if err != nil {
		return nil, err
	}
	return r.Sections[0].Cells, nil
}

func cellsPath(dir string, size int) string {
	return filepath.Join(dir, fmt.Sprintf("size-%d.json", size))
}
