// Command kconformance runs upstream's sig-network specs against the local
// cluster of make cluster (package kproxy.dev/kproxy/bench/conformance)
// under each node proxy configuration in turn (package
// kproxy.dev/kproxy/bench/cluster/proxies), and writes the reports:
//
//	kconformance [-dir CLUSTER_DIR] [-tools DIR] [-out DIR] [-specs services|conformance|wide|serial]
//	             [-focus RE] [-skip RE] [-proxies LIST|all] [-kproxy FILE] [-kproxy-image FILE] [-kube-proxy FILE]
//	             [-kube-proxy-image FILE]
//	kconformance compare OLD.json NEW.json
//	kconformance render REPORT.json
//	kconformance merge OUT.json REPORT.json...
//
// OUT/NAME/junit_01.xml and OUT/NAME/e2e.log are the framework's JUnit
// report and output under configuration NAME; OUT/conformance.json and
// OUT/conformance.md the table of specs × configurations. Afterwards the
// cluster runs kproxy as make cluster left it. It exits non-zero when a
// spec failed or a configuration could not be run through. compare prints
// the specs whose result changed between two runs; render prints a
// report's Markdown table from its JSON; merge joins the reports of runs of
// one selection of specs made apart (some configurations each) into
// OUT.json and prints its table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/cluster"
	"kproxy.dev/kproxy/bench/cluster/proxies"
	"kproxy.dev/kproxy/bench/conformance"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "compare":
		err = compare(os.Args[2:], os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "render":
		err = render(os.Args[2:], os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "merge":
		err = merge(os.Args[2:], os.Stdout)
	default:
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kconformance:", err)
		os.Exit(1)
	}
}

// render prints a report's Markdown table again, from its JSON.
func render(args []string, out io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: kconformance render REPORT.json")
	}
	r, err := conformance.ReadReport(args[0])
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, r.Markdown())
	return err
}

// merge writes the merged report of args[1:] to args[0] and prints its
// table.
func merge(args []string, out io.Writer) error {
	if len(args) < 2 {
		return errors.New("usage: kconformance merge OUT.json REPORT.json...")
	}
	var reports []conformance.Report
	for _, path := range args[1:] {
		r, err := conformance.ReadReport(path)
		if err != nil {
			return err
		}
		reports = append(reports, r)
	}
	merged, err := conformance.Merge(reports...)
	if err != nil {
		return err
	}
	if err := merged.WriteJSON(args[0]); err != nil {
		return err
	}
	_, err = io.WriteString(out, merged.Markdown())
	return err
}

func compare(args []string, out io.Writer) error {
	if len(args) != 2 {
		return errors.New("usage: kconformance compare OLD.json NEW.json")
	}
	old, err := conformance.ReadReport(args[0])
	if err != nil {
		return err
	}
	cur, err := conformance.ReadReport(args[1])
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, conformance.RenderChanges(conformance.Compare(old, cur)))
	return err
}

type options struct {
	dir, tools, out, focus, skip, selection string
	manifest, kproxyBin, kubeProxyBin       string
	kproxyImage, kubeProxyImage             string
	commit, command                         string
	timeout                                 time.Duration
	procs                                   int
}

func run() error {
	var o options
	flag.StringVar(&o.dir, "dir", cluster.DefaultStateDir, "the cluster's state directory")
	flag.StringVar(&o.tools, "tools", "bench/tools/bin", "directory with e2e.test and kubectl")
	flag.StringVar(&o.out, "out", "bin/conformance", "directory for the reports")
	set := flag.String("specs", "conformance", "spec selection: services, conformance, wide or serial (-focus and -skip override)")
	flag.StringVar(&o.focus, "focus", "", "specs to run (ginkgo focus), in place of the selection's")
	flag.StringVar(&o.skip, "skip", "", "specs to leave out (ginkgo skip), in place of the selection's")
	flag.StringVar(&o.selection, "proxies", "all", "comma-separated node proxy configurations, or all")
	flag.StringVar(&o.manifest, "manifest", "deploy/base/kproxy.yaml", "kproxy's manifest")
	flag.StringVar(&o.kproxyBin, "kproxy", "bin/image/kproxy", "kproxy binary for --cleanup on the nodes (the image's)")
	flag.StringVar(&o.kubeProxyBin, "kube-proxy", "bin/image/kube-proxy", "kube-proxy binary for --cleanup on the nodes (the image's)")
	flag.StringVar(&o.kproxyImage, "kproxy-image", "bin/kproxy-image.oci.tar", "kproxy's OCI archive (make image), imported into the nodes first")
	flag.StringVar(&o.kubeProxyImage, "kube-proxy-image", "bin/kube-proxy-image.oci.tar", "kube-proxy's OCI archive (make kube-proxy-image)")
	flag.StringVar(&o.commit, "commit", "", "the checkout's commit, for the report")
	flag.StringVar(&o.command, "command", "", "the command that ran this, for the report (default: this one)")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Hour, "bound on each configuration's specs")
	flag.IntVar(&o.procs, "procs", 1, "e2e.test processes sharing each configuration's specs (through the ginkgo command in -tools)")
	flag.Parse()
	sel, err := conformance.Select(*set)
	if err != nil {
		return err
	}
	if o.focus == "" {
		o.focus = sel.Focus
	}
	if o.skip == "" {
		o.skip = sel.Skip
	}
	if o.command == "" {
		o.command = strings.Join(os.Args, " ")
	}
	configs, err := proxies.Select(proxies.All(), o.selection)
	if err != nil {
		return err
	}
	for _, need := range []struct{ path, from string }{
		{o.kproxyBin, "make image"}, {o.kproxyImage, "make image"}, {o.kubeProxyBin, "make kube-proxy-image"}, {o.kubeProxyImage, "make kube-proxy-image"},
	} {
		if _, err := os.Stat(need.path); err != nil {
			return fmt.Errorf("%s is missing (%s builds it): %w", need.path, need.from, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	client, err := cluster.AdminClient(o.dir)
	if err != nil {
		return err
	}
	if err := conformance.CheckCluster(ctx, client); err != nil {
		return err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the nodes: %w", err)
	}
	manifest, err := os.ReadFile(o.manifest)
	if err != nil {
		return fmt.Errorf("reading kproxy's manifest: %w", err)
	}
	swap := &proxies.Swapper{Client: client, StateDir: o.dir, Nodes: cluster.Nodes(len(nodes.Items)),
		KproxyManifest: string(manifest), KproxyBinary: abs(o.kproxyBin), KubeProxyBinary: abs(o.kubeProxyBin),
		KproxyArchive: abs(o.kproxyImage), KubeProxyArchive: abs(o.kubeProxyImage)}
	report := conformance.Report{Schema: conformance.SchemaVersion, Header: conformance.Header{
		Date: time.Now().UTC(), Kernel: kernelRelease(), Cores: runtime.NumCPU(), Commit: o.commit,
		Command: o.command, Nodes: len(nodes.Items), Focus: o.focus, Skip: o.skip}}
	outDir := abs(o.out)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", outDir, err)
	}
	// make cluster's kproxy runs first; it goes like any other.
	previous := proxies.Config{Name: "kproxy (make cluster's)", Proxy: proxies.Kproxy}
	for _, cfg := range configs {
		if cfg.NotRun != "" {
			fmt.Printf("\n=== %s: %s\n", cfg.Name, cfg.NotRun)
			report.Proxies = append(report.Proxies, conformance.ProxyRun{Name: cfg.Name, NotRun: cfg.NotRun})
			continue
		}
		began := time.Now()
		pr := conformance.ProxyRun{Name: cfg.Name}
		specs, err := runOne(ctx, o, swap, previous, cfg, filepath.Join(outDir, cfg.Name))
		previous = cfg
		pr.Seconds = time.Since(began).Seconds()
		pr.Specs = conformance.SpecsJSON(specs)
		if err != nil {
			pr.Error = err.Error()
			fmt.Printf("\n=== %s: %v\n", cfg.Name, err)
		}
		report.Proxies = append(report.Proxies, pr)
		if err := writeReport(report, outDir); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err := writeReport(report, outDir); err != nil {
		return err
	}
	fmt.Printf("\n=== back to make cluster's kproxy\n")
	restoreErr := swapTo(ctx, swap, previous, proxies.Config{Name: "kproxy (make cluster's)", Proxy: proxies.Kproxy})
	fmt.Printf("\n%s\nWritten to %s (conformance.json, conformance.md; each configuration's JUnit report and e2e.log in its own directory)\n",
		report.Markdown(), outDir)
	if restoreErr != nil {
		return fmt.Errorf("restoring make cluster's kproxy: %w", restoreErr)
	}
	if report.Failed() {
		return errors.New("a spec failed or a configuration stopped short")
	}
	return nil
}

// runOne swaps the cluster from previous to cfg and runs the specs.
func runOne(ctx context.Context, o options, swap *proxies.Swapper, previous, cfg proxies.Config, dir string) ([]conformance.Spec, error) {
	fmt.Printf("\n=== %s: swapping from %s\n", cfg.Name, previous.Name)
	t := time.Now()
	if err := swapTo(ctx, swap, previous, cfg); err != nil {
		return nil, err
	}
	fmt.Printf("=== %s: ready on every node (%.0fs); running the specs\n", cfg.Name, time.Since(t).Seconds())
	r := conformance.Run{ToolsBin: abs(o.tools), Kubeconfig: cluster.AdminKubeconfig(o.dir), ReportDir: dir,
		Focus: o.focus, Skip: o.skip, Timeout: o.timeout, Procs: o.procs, Nodes: len(swap.Nodes)}
	if err := r.Execute(ctx, os.Stdout); err != nil {
		return nil, err
	}
	return conformance.ReadJUnitFile(r.JUnitPath())
}

func swapTo(ctx context.Context, swap *proxies.Swapper, previous, cfg proxies.Config) error {
	if err := swap.Remove(ctx); err != nil {
		return err
	}
	if err := swap.Cleanup(ctx, previous); err != nil {
		return err
	}
	return swap.Install(ctx, cfg)
}

func writeReport(r conformance.Report, dir string) error {
	if err := r.WriteJSON(filepath.Join(dir, "conformance.json")); err != nil {
		return err
	}
	md := filepath.Join(dir, "conformance.md")
	if err := os.WriteFile(md, []byte(r.Markdown()), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", md, err)
	}
	return nil
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
