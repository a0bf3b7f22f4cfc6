package conformance

import (
	"reflect"
	"testing"
	"time"
)

func TestRunCommand(t *testing.T) {
	base := Run{ToolsBin: "/t", Kubeconfig: "/k", ReportDir: "/r", Focus: "F", Skip: "S", Timeout: time.Hour}
	framework := []string{"--provider=local", "--kubeconfig=/k", "--kubectl-path=/t/kubectl", "--report-dir=/r",
		"--dump-logs-on-failure=false", "--disable-log-dump"}
	for _, tc := range []struct {
		name     string
		procs    int
		wantName string
		wantArgs []string
	}{
		{"one process", 1, "/t/e2e.test",
			append(append([]string{}, framework...), "--ginkgo.focus=F", "--ginkgo.skip=S", "--ginkgo.timeout=1h0m0s", "--ginkgo.no-color", "--ginkgo.v")},
		{"unset is one process", 0, "/t/e2e.test",
			append(append([]string{}, framework...), "--ginkgo.focus=F", "--ginkgo.skip=S", "--ginkgo.timeout=1h0m0s", "--ginkgo.no-color", "--ginkgo.v")},
		{"three processes", 3, "/t/ginkgo",
			append([]string{"--procs=3", "--focus=F", "--skip=S", "--timeout=1h0m0s", "--no-color", "--v", "/t/e2e.test", "--"}, framework...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			r.Procs = tc.procs
			name, args := r.command()
			if name != tc.wantName || !reflect.DeepEqual(args, tc.wantArgs) {
				t.Errorf("command() = %s %q, want %s %q", name, args, tc.wantName, tc.wantArgs)
			}
		})
	}
}
