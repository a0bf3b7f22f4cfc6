package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Binary names in the tools directory (make conformance-tools, make
// cluster-tools).
const (
	e2eBinary     = "e2e.test"
	kubectlBinary = "kubectl"
	ginkgoBinary  = "ginkgo"
)

// Spec selections (ginkgo focus expressions), from narrow to wide; SPECS.md
// lists what each holds and the [Serial] and [Disruptive] specs that can or
// cannot run here.
const (
	// ServicesFocus: the 15 Services conformance specs.
	ServicesFocus = `\[sig-network\] Services.*\[Conformance\]`
	// ConformanceFocus: every sig-network conformance spec (47): Services,
	// EndpointSlice, DNS, the pod networking checks, the API proxy.
	ConformanceFocus = `\[sig-network\].*\[Conformance\]`
	// WideFocus: everything the node proxy answers for (98 specs with
	// DefaultSkip): all Services and EndpointSlice specs, the
	// Networking granular Service checks, and the sig-network conformance
	// specs.
	WideFocus = `\[sig-network\] (Services|EndpointSlice|Networking .*Granular Checks: Services)|\[sig-network\].*\[Conformance\]`
	// DefaultSkip leaves out the specs that must run alone or break the
	// cluster, and those of optional features.
	DefaultSkip = `\[Serial\]|\[Disruptive\]|\[Feature:`
)

// SerialFocus: the [Serial] and [Disruptive] specs of the wide selection
// that can run here (SPECS.md says which cannot, and why); run with
// SerialSkip, one at a time.
const (
	SerialFocus = `\[sig-network\] Services (should work after restarting kube-proxy|should allow creating a basic SCTP service with pod and endpoints)`
	SerialSkip  = `\[Feature:`
)

// Selection is a named choice of specs.
type Selection struct {
	Focus, Skip string
}

// Select returns a named selection: services, conformance, wide or serial.
func Select(name string) (Selection, error) {
	switch name {
	case "services":
		return Selection{ServicesFocus, DefaultSkip}, nil
	case "conformance":
		return Selection{ConformanceFocus, DefaultSkip}, nil
	case "wide":
		return Selection{WideFocus, DefaultSkip}, nil
	case "serial":
		return Selection{SerialFocus, SerialSkip}, nil
	}
	return Selection{}, fmt.Errorf("unknown spec selection %q (services, conformance, wide or serial)", name)
}

// Run is one run of e2e.test against a cluster.
type Run struct {
	// ToolsBin holds e2e.test and kubectl.
	ToolsBin string
	// Kubeconfig reaches the cluster as its administrator.
	Kubeconfig string
	// ReportDir receives the framework's JUnit report (junit_01.xml) and
	// e2e.test's output (e2e.log).
	ReportDir string
	// Focus and Skip select specs by name (ginkgo regular expressions).
	Focus, Skip string
	// Timeout bounds the whole run (ginkgo's suite timeout).
	Timeout time.Duration
	// Procs is how many e2e.test processes share the specs, through the
	// ginkgo command in ToolsBin when above 1. Specs marked [Serial] still
	// run alone, after the others.
	Procs int
	// Nodes is the cluster's node count. The framework counts the nodes in
	// its first process only; the others skip every spec that needs two
	// nodes unless told.
	Nodes int
}

// JUnitPath is where the framework writes its JUnit report.
func (r Run) JUnitPath() string { return filepath.Join(r.ReportDir, "junit_01.xml") }

// ginkgoArgs select and report specs, given to e2e.test itself as
// --ginkgo.NAME or to the ginkgo command as --NAME.
func (r Run) ginkgoArgs(prefix string) []string {
	return []string{
		prefix + "focus=" + r.Focus,
		prefix + "skip=" + r.Skip,
		prefix + "timeout=" + r.Timeout.String(),
		prefix + "no-color",
		prefix + "v",
	}
}

// frameworkArgs are the e2e framework's own flags.
func (r Run) frameworkArgs() []string {
	args := []string{
		"--provider=local",
		"--kubeconfig=" + r.Kubeconfig,
		"--kubectl-path=" + filepath.Join(r.ToolsBin, kubectlBinary),
		"--report-dir=" + r.ReportDir,
		// The nodes' logs are in the cluster's state directory already;
		// the framework would try to reach them over SSH.
		"--dump-logs-on-failure=false",
		"--disable-log-dump",
	}
	if r.Nodes > 0 {
		args = append(args, "--num-nodes="+strconv.Itoa(r.Nodes))
	}
	return args
}

// command is the program and arguments of the run: e2e.test alone, or
// the ginkgo command running Procs of it.
func (r Run) command() (string, []string) {
	e2e := filepath.Join(r.ToolsBin, e2eBinary)
	if r.Procs <= 1 {
		return e2e, append(r.frameworkArgs(), r.ginkgoArgs("--ginkgo.")...)
	}
	args := append([]string{"--procs=" + strconv.Itoa(r.Procs)}, r.ginkgoArgs("--")...)
	args = append(append(args, e2e, "--"), r.frameworkArgs()...)
	return filepath.Join(r.ToolsBin, ginkgoBinary), args
}

// CheckCluster refuses a cluster the specs cannot pass in: one without the
// cluster DNS (kcluster up -coredns).
func CheckCluster(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the cluster runs no cluster DNS (Service kube-system/kube-dns): bring it up with kcluster up -coredns (make conformance does)")
	}
	if err != nil {
		return fmt.Errorf("looking for the cluster DNS: %w", err)
	}
	return nil
}

// Execute runs e2e.test, its output to out and to ReportDir/e2e.log. A
// failing spec is no error here: the report tells; an error is a run that
// could not report.
func (r Run) Execute(ctx context.Context, out io.Writer) error {
	if err := os.MkdirAll(r.ReportDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", r.ReportDir, err)
	}
	logPath := filepath.Join(r.ReportDir, "e2e.log")
	log, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating %s: %w", logPath, err)
	}
	defer log.Close()
	// A stale report would pass for this run's.
	if err := os.Remove(r.JUnitPath()); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the last report: %w", err)
	}
	name, args := r.command()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout = io.MultiWriter(out, log)
	cmd.Stderr = cmd.Stdout
	cmd.Dir = r.ReportDir
	runErr := cmd.Run()
	if _, err := os.Stat(r.JUnitPath()); err != nil {
		if runErr != nil {
			return fmt.Errorf("e2e.test (output in %s): %w", logPath, runErr)
		}
		return fmt.Errorf("e2e.test wrote no JUnit report (output in %s): %w", logPath, err)
	}
	return nil
}
