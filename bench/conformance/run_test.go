package conformance

import (
	"reflect"
	"testing"
	"time"
)

func TestRunCommand(t *testing.T) {
	framework := []string{"--provider=local", "--kubeconfig=/k", "--kubectl-path=/t/kubectl", "--report-dir=/r",
		"--dump-logs-on-failure=false", "--disable-log-dump"}
	withNodes := append(append([]string{}, framework...), "--num-nodes=3")
	inE2E := []string{"--ginkgo.focus=F", "--ginkgo.skip=S", "--ginkgo.timeout=1h0m0s", "--ginkgo.no-color", "--ginkgo.v"}
	for _, tc := range []struct {
		name         string
		procs, nodes int
		wantName     string
		wantArgs     []string
	}{
		{"one process", 1, 3, "/t/e2e.test", append(append([]string{}, withNodes...), inE2E...)},
		{"unset is one process", 0, 3, "/t/e2e.test", append(append([]string{}, withNodes...), inE2E...)},
		{"nodes unknown: the framework counts them", 1, 0, "/t/e2e.test", append(append([]string{}, framework...), inE2E...)},
		{"three processes", 3, 3, "/t/ginkgo",
			append([]string{"--procs=3", "--focus=F", "--skip=S", "--timeout=1h0m0s", "--no-color", "--v", "/t/e2e.test", "--"}, withNodes...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Run{ToolsBin: "/t", Kubeconfig: "/k", ReportDir: "/r", Focus: "F", Skip: "S", Timeout: time.Hour,
				Procs: tc.procs, Nodes: tc.nodes}
			name, args := r.command()
			if name != tc.wantName || !reflect.DeepEqual(args, tc.wantArgs) {
				t.Errorf("command() = %s %q, want %s %q", name, args, tc.wantName, tc.wantArgs)
			}
		})
	}
}
