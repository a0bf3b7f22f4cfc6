package syncscale

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// resultDirEnv tells a row's process (re-executed in its own namespace by
// lab.InFreshNetns) where to leave its result for the parent, which prints
// the table; it is set only in those processes.
const resultDirEnv = "KPROXY_SYNCSCALE_RESULT_DIR"

// BenchmarkSyncScale measures the sync table; see the package
// documentation. Every row runs in a process and network namespace of its
// own; this process collects their results and prints the table.
func BenchmarkSyncScale(b *testing.B) {
	settings, err := SettingsFromEnv(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	resultDir := os.Getenv(resultDirEnv)
	isRowProcess := resultDir != ""
	if !isRowProcess {
		lab.RequireRoot(b)
		checkTimeout(b, settings)
		checkTools(b)
		resultDir = b.TempDir()
	}
	kproxyBin, kubeProxyBin := lab.KproxyBinary(b), lab.KubeProxyBinary(b)

	started := time.Now()
	// A sub-benchmark called again for a larger b.N reports its first
	// measurement instead of measuring again.
	measured := map[string]Row{}
	for _, spec := range settings.Rows() {
		b.Run(spec.Name(), func(b *testing.B) {
			if lab.InFreshNetns(b, lab.KproxyBinaryEnv+"="+kproxyBin, resultDirEnv+"="+resultDir) {
				return
			}
			row, ok := measured[spec.Name()]
			if !ok {
				row = runRow(b, spec, settings, kproxyBin, kubeProxyBin)
				measured[spec.Name()] = row
				if err := WriteRow(filepath.Join(resultDir, spec.Name()+".json"), row); err != nil {
					b.Fatal(err)
				}
			}
			reportMetrics(b, row)
		})
	}
	if isRowProcess {
		return
	}

	table := &Table{Results: map[string]Row{}, Specs: settings.TableSpecs()}
	for _, spec := range table.Specs {
		row, err := ReadRow(filepath.Join(resultDir, spec.Name()+".json"))
		if err != nil {
			b.Errorf("row %s has no result (it failed; see its output above): %v", spec.Name(), err)
			continue
		}
		table.Results[spec.Name()] = row
	}
	table.Header = MachineHeader(kubeProxyBin, settings, time.Since(started))
	table.Notes = Notes(settings, table.Specs, table.Results)
	md := table.Markdown()
	fmt.Printf("\n%s\n", md)
	if out := os.Getenv("KPROXY_BENCH_TABLE"); out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			b.Errorf("writing the table to KPROXY_BENCH_TABLE=%s: %v", out, err)
		}
	}
}

// runRow measures one row inside its fresh namespace: the lab, the API
// objects, then kproxy and kube-proxy one after the other.
func runRow(b *testing.B, spec RowSpec, s Settings, kproxyBin, kubeProxyBin string) Row {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s syncscale %s: %s\n", time.Now().Format("15:04:05"), spec.Name(), fmt.Sprintf(format, args...))
	}

	api := lab.StartAPIServer(b)
	topo := lab.NewTopology(b, lab.TopologyOptions{Backends: 1})
	lab.CreateNode(b, api.Client, NodeName, topo.Node.IPv4.String())
	server := topo.Backends[0]
	ln, err := ServeAnswers(server, EndpointPort)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	if err := PrepareNode(topo.Node); err != nil {
		b.Fatal(err)
	}
	if err := Ask(ctx, topo.Client, netip.AddrPortFrom(server.IPv4, EndpointPort)); err != nil {
		b.Fatalf("the client host cannot reach the answer server directly: %v", err)
	}
	backend, iptablesMode := spec.Mode.Backend()
	if iptablesMode {
		if err := MarkBackend(ctx, backend); err != nil {
			b.Fatal(err)
		}
	}

	bulk, err := BulkClient(api.Config)
	if err != nil {
		b.Fatal(err)
	}
	took, err := CreateBulk(ctx, bulk, spec.Services)
	if err != nil {
		b.Fatal(err)
	}
	logf("created %d services and endpoint slices in %v (load average %s)", spec.Services, took, benchtable.LoadAverage())

	rl := &RowLab{Spec: spec, Settings: s, Client: api.Client, ClientHost: topo.Client, Server: server.IPv4, Logf: logf}
	row := Row{Spec: spec, Populate: took, Proxies: map[Proxy]Measured{}, Load: benchtable.LoadAverage()}
	flags := ProxyFlags(api.KubeconfigPath, spec.Mode, s.MinSyncPeriod)

	if s.Runs(Kproxy) {
		km, err := rl.Measure(ctx, Kproxy, s.KproxyBudget, 0, func() *lab.Process {
			return topo.Node.StartFor(b, kproxyBin, append(slices.Clone(flags), s.KproxyFlags...)...)
		})
		if err != nil {
			b.Fatal(err)
		}
		row.Proxies[Kproxy] = km
		if err := rl.ResetAPI(ctx, 0); err != nil {
			b.Fatal(err)
		}
		if err := CleanAfter(ctx, topo.Node, kproxyBin, spec.Mode); err != nil {
			b.Fatal(err)
		}
	}

	if s.Runs(KubeProxy) {
		// kube-proxy's iptables mode runs the iptables of its PATH; its
		// nftables mode runs nft, whichever backend iptables has.
		launcher := kubeProxyBin
		if iptablesMode {
			launcher, err = KubeProxyLauncher(ctx, b.TempDir(), kubeProxyBin, backend)
			if err != nil {
				b.Fatal(err)
			}
		}
		kpm, err := rl.Measure(ctx, KubeProxy, s.KubeProxyBudget, s.NPLRepeats, func() *lab.Process {
			return topo.Node.StartFor(b, launcher, flags...)
		})
		if err != nil {
			b.Fatal(err)
		}
		row.Proxies[KubeProxy] = kpm
	}
	row.LoadAfter = benchtable.LoadAverage()
	return row
}

// reportMetrics reports a row's numbers as benchmark metrics (seconds);
// a first full sync over budget is reported as the budget, under a unit
// saying so.
func reportMetrics(b *testing.B, r Row) {
	b.ReportMetric(r.Populate.Seconds(), "populate-s")
	for _, p := range []Proxy{Kproxy, KubeProxy} {
		m, ok := r.Proxies[p]
		if !ok {
			continue
		}
		b.ReportMetric(float64(m.RSS)/(1<<20), string(p)+"-rss-MiB")
		if m.OverBudget {
			b.ReportMetric(m.Budget.Seconds(), string(p)+"-full-over-budget-s")
			continue
		}
		b.ReportMetric(m.FullSync.Seconds(), string(p)+"-full-s")
		b.ReportMetric(m.FullSyncHist.Seconds(), string(p)+"-full-rules-s")
		b.ReportMetric(m.Change.Seconds(), string(p)+"-change-s")
		b.ReportMetric(m.NPLMedian().Seconds(), string(p)+"-npl-p50-s")
		b.ReportMetric(float64(m.Rules), string(p)+"-rules")
		b.ReportMetric(float64(m.DumpBytes)/(1<<20), string(p)+"-dump-MiB")
	}
}

// checkTimeout skips the run when -timeout would cut it short: `go test`
// kills everything, rows in flight included, when it expires. A run that
// picked this benchmark up by a catch-all -bench pattern (as `make bench`
// does, with the default 10 minutes) says how to run it instead.
func checkTimeout(b *testing.B, s Settings) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return
	}
	timeout, err := time.ParseDuration(f.Value.String())
	if err != nil || timeout == 0 {
		return
	}
	if need := s.Estimate(); timeout < need {
		b.Skipf("-timeout %v may cut this run short (up to about %v with %s): run it alone with "+
			"`go test -run '^$' -bench SyncScale -benchtime 1x -timeout 0 ./bench/syncscale/`", timeout, need.Round(time.Minute), s)
	}
}

// checkTools fails early when a command a row needs is missing.
func checkTools(b *testing.B) {
	var missing []error
	for _, tool := range []string{"unshare", "ip", "sysctl", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, err)
		}
	}
	if _, err := exec.LookPath("nft"); err != nil {
		missing = append(missing, err)
	}
	for _, be := range kernel.Backends() {
		for _, tool := range []string{be.Command(ipfamily.IPv4), be.SaveCommand(ipfamily.IPv4), "xtables-" + string(be) + "-multi"} {
			if _, err := exec.LookPath(tool); err != nil {
				missing = append(missing, err)
			}
		}
	}
	if err := errors.Join(missing...); err != nil {
		b.Fatalf("tools the benchmark needs are missing (`make deps` installs iptables): %v", err)
	}
}
