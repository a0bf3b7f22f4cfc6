package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/cmd/kproxy/options"
)

// The tests here run kube-proxy v1.36.3 and kproxy one after the other in
// one network namespace, against one real kube-apiserver, and compare what
// an operator's tooling sees of them: metric names, /metrics/slis, /configz,
// /flagz and /statusz.

const (
	parityNode        = "parity-node"
	parityMetricsAddr = "127.0.0.1:10249"
	parityHealthzAddr = "127.0.0.1:10256"
)

// scrape is what one proxy served once it had synced.
type scrape struct {
	// bodies by path; status codes by path.
	bodies map[string]string
	codes  map[string]int
	log    string
}

// observedPaths are fetched from the metrics address of each proxy.
var observedPaths = []string{"/metrics", "/metrics/slis", "/configz", "/flagz", "/statusz", "/healthz", "/livez", "/proxyMode"}

// runAndScrape starts bin with args, waits for its first sync, fetches
// observedPaths and stops it with SIGTERM.
func runAndScrape(t *testing.T, name, bin string, args ...string) scrape {
	t.Helper()
	return runAndScrapeAfter(t, name, bin, nil, args...)
}

// runAndScrapeAfter is runAndScrape that, when afterSync is not nil, calls
// it once the proxy has synced and before the pages are fetched, with a
// reader of the proxy's /metrics: for changes the scrape should show.
func runAndScrapeAfter(t *testing.T, name, bin string, afterSync func(metrics func() (string, error)), args ...string) scrape {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	defer stop()
	client := http.Client{Timeout: 5 * time.Second}
	get := func(path, accept string) (int, string, error) {
		req, err := http.NewRequest(http.MethodGet, "http://"+parityMetricsAddr+path, nil)
		if err != nil {
			return 0, "", err
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, body, err := get("/metrics", "")
		if err == nil && synced(body) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not sync within 60s (last error %v); output:\n%s", name, err, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// kube-proxy runs one proxier per family, and the second one's first
	// sync may come later: wait a little for both families (the lab's node
	// proxies both) before comparing.
	for both := time.Now().Add(15 * time.Second); time.Now().Before(both); time.Sleep(200 * time.Millisecond) {
		if _, body, err := get("/metrics", ""); err == nil && familiesOf(body) == "IPv4,IPv6" {
			break
		}
	}
	if afterSync != nil {
		afterSync(func() (string, error) {
			code, body, err := get("/metrics", "")
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("GET /metrics: status %d", code)
			}
			return body, err
		})
	}
	s := scrape{bodies: map[string]string{}, codes: map[string]int{}}
	for _, p := range observedPaths {
		code, body, err := get(p, "")
		if err != nil {
			t.Fatalf("%s: GET %s: %v", name, p, err)
		}
		s.codes[p], s.bodies[p] = code, body
	}
	// The structured forms of the zpages, under "<path>?json".
	for _, z := range []struct{ path, kind string }{{"/flagz", "Flagz"}, {"/statusz", "Statusz"}} {
		code, body, err := get(z.path, "application/json;as="+z.kind+";v=v1beta1;g=config.k8s.io")
		if err != nil {
			t.Fatalf("%s: GET %s as JSON: %v", name, z.path, err)
		}
		s.codes[z.path+"?json"], s.bodies[z.path+"?json"] = code, body
	}
	stop()
	s.log = out.String()
	return s
}

// synced says whether a /metrics body shows a finished sync.
func synced(body string) bool {
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, "kubeproxy_sync_proxy_rules_duration_seconds_count") &&
			!strings.HasSuffix(line, " 0") {
			return true
		}
	}
	return false
}

// metricNames lists the metric families a Prometheus text body declares.
func metricNames(body string) []string {
	var names []string
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names = append(names, f[2])
		}
	}
	sort.Strings(names)
	return slices.Compact(names)
}

// familiesOf lists the ip_family values of the sync duration histogram.
func familiesOf(body string) string {
	var fams []string
	for line := range strings.SplitSeq(body, "\n") {
		rest, ok := strings.CutPrefix(line, `kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="`)
		if fam, _, ok2 := strings.Cut(rest, `"`); ok && ok2 {
			fams = append(fams, fam)
		}
	}
	sort.Strings(fams)
	return strings.Join(fams, ",")
}

// labelKeys maps each metric family of a Prometheus text body to the
// sorted label names of its samples (without a histogram's le).
func labelKeys(body string) map[string]string {
	families := map[string]bool{}
	for _, n := range metricNames(body) {
		families[n] = true
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, _ := strings.Cut(line, "{")
		if !strings.Contains(line, "{") {
			name, _, _ = strings.Cut(line, " ")
			labels = ""
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && families[base] {
				name = base
			}
		}
		labels, _, _ = strings.Cut(labels, "}")
		var keys []string
		for kv := range strings.SplitSeq(labels, ",") {
			if k, _, ok := strings.Cut(kv, "="); ok && k != "le" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		out[name] = strings.Join(keys, ",")
	}
	return out
}

// parityRuns starts the lab API server and a Node, runs kube-proxy and
// kproxy in mode with the same flags, and returns both scrapes.
type parityRuns struct {
	kubeProxy, kproxy map[string]scrape // by proxy mode
}

func runParity(t *testing.T, kproxyBin string, modes []string, extra ...string) parityRuns {
	t.Helper()
	api := lab.StartAPIServer(t)
	lab.CreateNode(t, api.Client, parityNode, "198.19.0.1")
	kubeProxyBin := lab.KubeProxyBinary(t)
	runs := parityRuns{kubeProxy: map[string]scrape{}, kproxy: map[string]scrape{}}
	for _, mode := range modes {
		args := parityArgs(api, append([]string{"--proxy-mode=" + mode}, extra...)...)
		runs.kubeProxy[mode] = runAndScrape(t, "kube-proxy "+mode, kubeProxyBin, args...)
		runs.kproxy[mode] = runAndScrape(t, "kproxy "+mode, kproxyBin, args...)
	}
	return runs
}

// parityArgs are the flags both proxies run with against api, then extra.
func parityArgs(api *lab.APIServer, extra ...string) []string {
	return append([]string{
		"--kubeconfig=" + api.KubeconfigPath, "--hostname-override=" + parityNode,
		"--metrics-bind-address=" + parityMetricsAddr, "--healthz-bind-address=" + parityHealthzAddr,
		// Conntrack settings are global or absent in a namespace: leave them.
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
	}, extra...)
}

// intendedMetricOmissions are kube-proxy metrics kproxy does not export,
// each with why. A prefix ends in "_" and covers every name it starts.
var intendedMetricOmissions = map[string]string{
	"apiserver_":  "registered by k8s.io/apiserver packages kube-proxy links (audit, envelope encryption, webhooks, validation); they describe an API server, and stay zero in kube-proxy",
	"aggregator_": "registered by the kube-aggregator discovery code kube-proxy links; zero in kube-proxy",
}

// sampledLater are kube-proxy metrics kproxy registers (TestRestClientMetrics
// in sync/metrics checks them) that may have no sample yet when the test
// scrapes, and a metric family without samples is not printed: client-go
// observes them only for plain requests, not for its informers' watches,
// and the one plain request either proxy makes is the POST of its Starting
// event, which kube-proxy sends before its first sync and kproxy once its
// sources run, possibly after (TestDashboardMetricsInEveryMode sees both
// with it). Unlike intendedMetricOmissions, kproxy may serve them.
var sampledLater = map[string]bool{
	"rest_client_rate_limiter_duration_seconds": true,
	"rest_client_request_duration_seconds":      true,
	"rest_client_request_size_bytes":            true,
	"rest_client_response_size_bytes":           true,
}

func omitted(name string) (string, bool) {
	for k, why := range intendedMetricOmissions {
		if name == k || (strings.HasSuffix(k, "_") && strings.HasPrefix(name, k)) {
			return why, true
		}
	}
	return "", false
}

// TestMetricNamesCoverKubeProxy fails on any metric kube-proxy v1.36.3
// serves, in its iptables and nftables modes, that kproxy in the same mode
// lacks, unless intendedMetricOmissions says why; and on an omission that
// kube-proxy no longer has or kproxy now serves (a stale entry).
func TestMetricNamesCoverKubeProxy(t *testing.T) {
	lab.RequireRoot(t)
	bin := inNetnsWithBinary(t)
	if bin == "" {
		return
	}
	modes := []string{"iptables", "nftables"}
	runs := runParity(t, bin, modes)
	usedOmissions := map[string]bool{}
	for _, mode := range modes {
		kp, kx := metricNames(runs.kubeProxy[mode].bodies["/metrics"]), metricNames(runs.kproxy[mode].bodies["/metrics"])
		if len(kp) < 50 {
			t.Fatalf("kube-proxy %s served only %d metric names:\n%s", mode, len(kp), runs.kubeProxy[mode].bodies["/metrics"])
		}
		have := map[string]bool{}
		for _, n := range kx {
			have[n] = true
		}
		var missing []string
		for _, n := range kp {
			if have[n] {
				if _, ok := omitted(n); ok {
					t.Errorf("%s mode: kproxy serves %s, which intendedMetricOmissions still lists", mode, n)
				}
				continue
			}
			if sampledLater[n] {
				continue
			}
			if _, ok := omitted(n); ok {
				for k := range intendedMetricOmissions {
					if n == k || (strings.HasSuffix(k, "_") && strings.HasPrefix(n, k)) {
						usedOmissions[k] = true
					}
				}
				continue
			}
			missing = append(missing, n)
		}
		if len(missing) > 0 {
			t.Errorf("%s mode: kproxy lacks %d of kube-proxy's metrics:\n  %s", mode, len(missing), strings.Join(missing, "\n  "))
		}
		t.Logf("%s mode: kube-proxy serves %d metric names, kproxy %d; families %s", mode, len(kp), len(kx), familiesOf(runs.kproxy[mode].bodies["/metrics"]))
		// Both proxy the same families.
		if w, g := familiesOf(runs.kubeProxy[mode].bodies["/metrics"]), familiesOf(runs.kproxy[mode].bodies["/metrics"]); w != g || w == "" {
			t.Errorf("%s mode: kubeproxy_sync_proxy_rules_duration_seconds by ip_family: kproxy %q, kube-proxy %q", mode, g, w)
		}
		// kube-proxy's own metrics carry the same labels in both.
		kpLabels, kxLabels := labelKeys(runs.kubeProxy[mode].bodies["/metrics"]), labelKeys(runs.kproxy[mode].bodies["/metrics"])
		for name, keys := range kpLabels {
			if !strings.HasPrefix(name, "kubeproxy_") || !have[name] {
				continue
			}
			if got := kxLabels[name]; got != keys {
				t.Errorf("%s mode: %s has labels {%s} in kproxy, {%s} in kube-proxy", mode, name, got, keys)
			}
		}
	}
	// kubernetes_feature_enabled: every gate, stage and value as kube-proxy's;
	// /configz as kube-proxy's, whose sync periods depend on the mode.
	for _, mode := range modes {
		compareFamily(t, mode, "kubernetes_feature_enabled", runs.kubeProxy[mode].bodies["/metrics"], runs.kproxy[mode].bodies["/metrics"], 100)
		t.Run(mode+" configz", func(t *testing.T) {
			compareConfigz(t, runs.kubeProxy[mode].bodies["/configz"], runs.kproxy[mode].bodies["/configz"])
		})
	}
	// kubernetes_build_info says what `kproxy --version` says.
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("kproxy --version: %v", err)
	}
	version := strings.TrimPrefix(strings.TrimSpace(string(out)), "kproxy version ")
	version, _, _ = strings.Cut(version, " (") // an explicit version names the revision after it
	if body := runs.kproxy[modes[0]].bodies["/metrics"]; !strings.Contains(body, `git_version="`+version+`"`) {
		t.Errorf("kproxy's kubernetes_build_info lacks git_version=%q (kproxy --version: %q)", version, out)
	}
	for k := range intendedMetricOmissions {
		if !usedOmissions[k] {
			t.Errorf("intendedMetricOmissions lists %s, which kube-proxy does not serve in %v", k, modes)
		}
	}
}

// familyLines returns a Prometheus text body's lines of the metric family
// name (HELP, TYPE and samples), sorted.
func familyLines(body, name string) []string {
	var out []string
	for line := range strings.SplitSeq(body, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "#" && f[2] == name,
			strings.HasPrefix(line, name+"{"), strings.HasPrefix(line, name+" "):
			out = append(out, line)
		}
	}
	sort.Strings(out)
	return out
}

// compareFamily fails unless kproxy's body has the lines of family name
// that kube-proxy's has, and kube-proxy's has at least minLines of them.
func compareFamily(t *testing.T, what, name, kubeProxyBody, kproxyBody string, minLines int) {
	t.Helper()
	want, got := familyLines(kubeProxyBody, name), familyLines(kproxyBody, name)
	if len(want) < minLines {
		t.Fatalf("%s: kube-proxy serves only %d lines of %s:\n%s", what, len(want), name, strings.Join(want, "\n"))
	}
	if w, g := strings.Join(want, "\n"), strings.Join(got, "\n"); w != g {
		var diff []string
		for _, l := range want {
			if !slices.Contains(got, l) {
				diff = append(diff, "-"+l)
			}
		}
		for _, l := range got {
			if !slices.Contains(want, l) {
				diff = append(diff, "+"+l)
			}
		}
		t.Errorf("%s: %s differs (- kube-proxy only, + kproxy only):\n%s", what, name, strings.Join(diff, "\n"))
	}
}

func TestFamilyLines(t *testing.T) {
	body := `# HELP kubernetes_feature_enabled [BETA] stage and enablement
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="B",stage=""} 1
kubernetes_feature_enabled{name="A",stage="ALPHA"} 0
# HELP kubernetes_feature_enabled_other x
kubernetes_feature_enabled_other 1
`
	got := strings.Join(familyLines(body, "kubernetes_feature_enabled"), "\n")
	want := `# HELP kubernetes_feature_enabled [BETA] stage and enablement
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="A",stage="ALPHA"} 0
kubernetes_feature_enabled{name="B",stage=""} 1`
	if got != want {
		t.Errorf("familyLines = %q, want %q", got, want)
	}
}

func TestLabelKeys(t *testing.T) {
	body := `# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.001"} 0
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1
# TYPE kubeproxy_sync_proxy_rules_iptables_last gauge
kubeproxy_sync_proxy_rules_iptables_last{table="nat",ip_family="IPv4"} 3
# TYPE kubeproxy_sync_proxy_rules_service_changes_total counter
kubeproxy_sync_proxy_rules_service_changes_total 2
`
	got := labelKeys(body)
	want := map[string]string{
		"kubeproxy_sync_proxy_rules_duration_seconds":      "ip_family",
		"kubeproxy_sync_proxy_rules_iptables_last":         "ip_family,table",
		"kubeproxy_sync_proxy_rules_service_changes_total": "",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("labelKeys = %v, want %v", got, want)
	}
}

// TestDebugPagesMatchKubeProxy compares /configz, /flagz, /statusz and
// /metrics/slis of kube-proxy v1.36.3 and kproxy run with the same flags.
func TestDebugPagesMatchKubeProxy(t *testing.T) {
	lab.RequireRoot(t)
	bin := inNetnsWithBinary(t)
	if bin == "" {
		return
	}
	// In JSON: the pages show it, and a whole run logs in it.
	// A gate set (one neither proxy acts on) shows in /configz, /flagz and
	// kubernetes_feature_enabled.
	runs := runParity(t, bin, []string{"iptables"}, "--logging-format=json", "--feature-gates=APIServingWithRoutine=true")
	kp, kx := runs.kubeProxy["iptables"], runs.kproxy["iptables"]
	if !strings.Contains(kp.bodies["/metrics"], `kubernetes_feature_enabled{name="APIServingWithRoutine",stage="ALPHA"} 1`) {
		t.Errorf("kube-proxy did not take --feature-gates=APIServingWithRoutine=true")
	}
	compareFamily(t, "--feature-gates=APIServingWithRoutine=true", "kubernetes_feature_enabled", kp.bodies["/metrics"], kx.bodies["/metrics"], 100)
	t.Run("JSON log of a run", func(t *testing.T) {
		for _, r := range []struct {
			who, log, started string
		}{{"kube-proxy", kp.log, "Starting endpoint slice config controller"}, {"kproxy", kx.log, "kproxy started"}} {
			sawJSON, sawStarted := false, false
			for line := range strings.SplitSeq(strings.TrimSpace(r.log), "\n") {
				var entry map[string]any
				if json.Unmarshal([]byte(line), &entry) != nil {
					if sawJSON {
						t.Errorf("%s: text line %q after the switch to JSON", r.who, line)
					}
					continue
				}
				sawJSON = true
				sawStarted = sawStarted || entry["msg"] == r.started
			}
			if !sawStarted {
				t.Errorf("%s did not log %q in JSON:\n%s", r.who, r.started, r.log)
			}
		}
	})
	for _, p := range []string{"/metrics", "/metrics/slis", "/configz", "/flagz", "/statusz", "/flagz?json", "/statusz?json"} {
		if kp.codes[p] != 200 || kx.codes[p] != 200 {
			t.Errorf("GET %s: kube-proxy %d, kproxy %d; want 200 from both", p, kp.codes[p], kx.codes[p])
		}
	}

	t.Run("configz", func(t *testing.T) { compareConfigz(t, kp.bodies["/configz"], kx.bodies["/configz"]) })

	t.Run("flagz", func(t *testing.T) {
		var want, got struct {
			Kind, APIVersion string
			Flags            map[string]string
		}
		if err := json.Unmarshal([]byte(kp.bodies["/flagz?json"]), &want); err != nil {
			t.Fatalf("kube-proxy's /flagz JSON: %v", err)
		}
		if err := json.Unmarshal([]byte(kx.bodies["/flagz?json"]), &got); err != nil {
			t.Fatalf("kproxy's /flagz JSON: %v", err)
		}
		if got.Kind != want.Kind || got.APIVersion != want.APIVersion {
			t.Errorf("/flagz JSON is %s %s, kube-proxy's %s %s", got.Kind, got.APIVersion, want.Kind, want.APIVersion)
		}
		if len(want.Flags) < 40 {
			t.Fatalf("kube-proxy's /flagz lists only %d flags", len(want.Flags))
		}
		for name, v := range want.Flags {
			if gv, ok := got.Flags[name]; !ok || gv != v {
				t.Errorf("/flagz %s: kproxy %q (listed: %v), kube-proxy %q", name, gv, ok, v)
			}
		}
		// The text form: the same header, then one line per flag.
		wantLines, gotLines := strings.Split(kp.bodies["/flagz"], "\n"), strings.Split(kx.bodies["/flagz"], "\n")
		if len(wantLines) < 3 || len(gotLines) < 3 || strings.Replace(wantLines[1], "kube-proxy", "kproxy", 1) != gotLines[1] || wantLines[2] != gotLines[2] {
			t.Errorf("/flagz text header: kproxy %q, kube-proxy %q", gotLines[:min(3, len(gotLines))], wantLines[:min(3, len(wantLines))])
		}
		if len(gotLines) != len(got.Flags)+4 {
			t.Errorf("kproxy's /flagz text has %d lines for %d flags", len(gotLines), len(got.Flags))
		}
	})

	t.Run("statusz", func(t *testing.T) {
		keys := func(body string) []string {
			var out []string
			lines := strings.Split(body, "\n")
			for _, line := range lines[min(3, len(lines)):] {
				if line != "" {
					out = append(out, statuszKey(line))
				}
			}
			return out
		}
		want, got := keys(kp.bodies["/statusz"]), keys(kx.bodies["/statusz"])
		wantWithoutEmulation := slices.DeleteFunc(slices.Clone(want), func(k string) bool { return k == "Emulation version" })
		if strings.Join(got, "|") != strings.Join(wantWithoutEmulation, "|") {
			t.Errorf("/statusz lines: kproxy %q, kube-proxy %q (kproxy emulates no Kubernetes version)", got, want)
		}
		var wantJ, gotJ struct {
			Kind, APIVersion, GoVersion string
			Paths                       []string
		}
		if err := json.Unmarshal([]byte(kp.bodies["/statusz?json"]), &wantJ); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(kx.bodies["/statusz?json"]), &gotJ); err != nil {
			t.Fatal(err)
		}
		if gotJ.Kind != wantJ.Kind || gotJ.APIVersion != wantJ.APIVersion || gotJ.GoVersion == "" {
			t.Errorf("/statusz JSON: kproxy %+v, kube-proxy %+v", gotJ, wantJ)
		}
		if strings.Join(gotJ.Paths, " ") != strings.Join(wantJ.Paths, " ") {
			t.Errorf("/statusz paths: kproxy %q, kube-proxy %q", gotJ.Paths, wantJ.Paths)
		}
	})

	// The metrics port's other pages: kube-proxy's /healthz there is the
	// generic ping ("ok"), not the proxy's health, and it has no /livez.
	t.Run("healthz, livez, proxyMode", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/livez", "/proxyMode"} {
			if kp.codes[p] != kx.codes[p] || kp.bodies[p] != kx.bodies[p] {
				t.Errorf("%s on the metrics port: kproxy %d %q, kube-proxy %d %q", p, kx.codes[p], kx.bodies[p], kp.codes[p], kp.bodies[p])
			}
		}
	})

	t.Run("metrics/slis", func(t *testing.T) {
		if w, g := metricNames(kp.bodies["/metrics/slis"]), metricNames(kx.bodies["/metrics/slis"]); strings.Join(w, " ") != strings.Join(g, " ") {
			t.Errorf("/metrics/slis families: kproxy %q, kube-proxy %q", g, w)
		}
	})
}

// compareConfigz fails unless kproxy's /configz has kube-proxy's paths
// and values, and no others.
func compareConfigz(t *testing.T, kubeProxyBody, kproxyBody string) {
	t.Helper()
	want, got := flatJSON(t, kubeProxyBody), flatJSON(t, kproxyBody)
	if len(want) < 50 {
		t.Fatalf("kube-proxy's /configz has only %d values:\n%s", len(want), kubeProxyBody)
	}
	for path, v := range want {
		switch gv, ok := got[path]; {
		case !ok:
			t.Errorf("kproxy's /configz lacks %s (kube-proxy: %s)", path, v)
		case gv != v:
			t.Errorf("/configz %s: kproxy %s, kube-proxy %s", path, gv, v)
		}
	}
	for path, v := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("kproxy's /configz has %s = %s, which kube-proxy's lacks", path, v)
		}
	}
}

// statuszKey is the key of a /statusz text line: what precedes its
// delimiter (":", ": ", "=" or " ", one per response).
func statuszKey(line string) string {
	for _, key := range []string{"Started", "Up", "Go version", "Binary version", "Emulation version", "Paths"} {
		if strings.HasPrefix(line, key) {
			return key
		}
	}
	return line
}

// flatJSON flattens a JSON document into path -> JSON-encoded value.
func flatJSON(t *testing.T, body string) map[string]string {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, body)
	}
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, c := range m {
				walk(strings.TrimPrefix(prefix+"."+k, "."), c)
			}
			return
		}
		b, _ := json.Marshal(v)
		out[prefix] = string(b)
	}
	walk("", doc)
	return out
}

// TestDebugPagesGates: /flagz and /statusz follow kube-proxy's
// ComponentFlagz and ComponentStatusz gates, on by default.
func TestDebugPagesGates(t *testing.T) {
	eff := options.NewDefaultFileConfiguration()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("proxy-mode", "", "")
	tests := []struct {
		gates               map[string]bool
		wantFlagz, wantStat bool
	}{
		{nil, true, true},
		{map[string]bool{"ComponentFlagz": false}, false, true},
		{map[string]bool{"ComponentStatusz": false, "ComponentFlagz": true}, true, false},
	}
	for _, tt := range tests {
		dbg, err := debugPages(eff, fs, tt.gates)
		if err != nil {
			t.Fatal(err)
		}
		if (dbg.Flagz != nil) != tt.wantFlagz || dbg.Statusz != tt.wantStat || len(dbg.Configz) == 0 {
			t.Errorf("gates %v: flagz %v statusz %v configz %d bytes; want flagz %v statusz %v", tt.gates, dbg.Flagz != nil, dbg.Statusz, len(dbg.Configz), tt.wantFlagz, tt.wantStat)
		}
	}
}

// TestFlagzShowsKubeProxyValues: /flagz shows --detect-local-mode as
// kube-proxy does, ClusterCIDR once defaulted without --config and the
// flag's own value with it (kube-proxy defaults the file's configuration,
// not the flag's), and kube-proxy's defaults of --ipvs-min-sync-period and
// the cAdvisor flags.
func TestFlagzShowsKubeProxyValues(t *testing.T) {
	tests := []struct {
		args []string
		want map[string]string
	}{
		{nil, map[string]string{"detect-local-mode": "ClusterCIDR", "ipvs-min-sync-period": "1s",
			"boot-id-file": "/proc/sys/kernel/random/boot_id", "machine-id-file": "/etc/machine-id,/var/lib/dbus/machine-id"}},
		{[]string{"--detect-local-mode=NodeCIDR", "--ipvs-min-sync-period=0s", "--boot-id-file=/x"},
			map[string]string{"detect-local-mode": "NodeCIDR", "ipvs-min-sync-period": "0s", "boot-id-file": "/x"}},
		{[]string{"--config=/some/file"}, map[string]string{"detect-local-mode": "", "ipvs-min-sync-period": "1s"}},
	}
	for _, tt := range tests {
		fs := pflag.NewFlagSet("kproxy", pflag.ContinueOnError)
		options.NewOptions().AddFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		dbg, err := debugPages(options.NewDefaultFileConfiguration(), fs, nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range tt.want {
			if got, ok := dbg.Flagz[name]; !ok || got != want {
				t.Errorf("%q: /flagz %s = %q (listed: %v), want %q", tt.args, name, got, ok, want)
			}
		}
	}
}

// TestBindHardFailEventMatchesKubeProxy: with --bind-address-hard-fail and
// the healthz or the metrics port in use, kube-proxy v1.36.3 and kproxy
// both exit with status 1, and kproxy records on its Node (the
// events.k8s.io/v1 API of a real kube-apiserver) the Warning event
// kube-proxy records. kube-proxy exits right after recording it and loses
// it in most runs, so what it records is compared when it does, and is
// otherwise built from its reason for that server and the error it logs,
// which is the event's note.
func TestBindHardFailEventMatchesKubeProxy(t *testing.T) {
	lab.RequireRoot(t)
	bin := inNetnsWithBinary(t)
	if bin == "" {
		return
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	api := lab.StartAPIServer(t)
	lab.CreateNode(t, api.Client, parityNode, "198.19.0.1")
	ranError := regexp.MustCompile(`"Error running ProxyServer" err="([^"]*)"`)
	for _, busy := range []struct{ name, addr, reason string }{
		{"healthz", parityHealthzAddr, "FailedToStartProxierHealthcheck"},
		{"metrics", parityMetricsAddr, "FailedToStartMetricServer"},
	} {
		t.Run(busy.name+" port in use", func(t *testing.T) {
			ln, err := net.Listen("tcp", busy.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// run runs one proxy to its exit and returns its output and the
			// Warning events on the Node, waiting up to wait for the first.
			run := func(name, bin string, wait time.Duration) (string, []string) {
				if err := api.Client.EventsV1().Events(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
					t.Fatalf("deleting events: %v", err)
				}
				out, err := exec.CommandContext(ctx, bin, "--kubeconfig="+api.KubeconfigPath, "--hostname-override="+parityNode,
					"--proxy-mode=iptables", "--metrics-bind-address="+parityMetricsAddr, "--healthz-bind-address="+parityHealthzAddr,
					"--bind-address-hard-fail", "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
					"--conntrack-tcp-timeout-close-wait=0").CombinedOutput()
				if code := exitCode(err); code != 1 {
					t.Fatalf("%s exited with %d (%v), want 1:\n%s", name, code, err, out)
				}
				var warnings []string
				for end := time.Now().Add(wait); ; time.Sleep(200 * time.Millisecond) {
					list, err := api.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
					if err != nil {
						t.Fatalf("listing events: %v", err)
					}
					warnings = warnings[:0]
					for _, e := range list.Items {
						if e.Regarding.Kind == "Node" && e.Type == "Warning" {
							warnings = append(warnings, fmt.Sprintf("namespace=%s regarding=%s/%s/%s reason=%s action=%s controller=%s instance=%s note=%q",
								e.Namespace, e.Regarding.APIVersion, e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Action,
								e.ReportingController, e.ReportingInstance, e.Note))
						}
					}
					if len(warnings) > 0 || time.Now().After(end) {
						break
					}
				}
				sort.Strings(warnings)
				return string(out), warnings
			}
			kpOut, kpEvents := run("kube-proxy", lab.KubeProxyBinary(t), 3*time.Second)
			m := ranError.FindStringSubmatch(kpOut)
			if m == nil {
				t.Fatalf("kube-proxy did not log why it stopped:\n%s", kpOut)
			}
			want := []string{fmt.Sprintf("namespace=default regarding=v1/Node/%s reason=%s action=StartKubeProxy controller=kube-proxy instance=kube-proxy-%s note=%q",
				parityNode, busy.reason, host, m[1])}
			if len(kpEvents) > 0 && !slices.Equal(kpEvents, want) {
				t.Errorf("kube-proxy recorded %q; the test expects %q (has kube-proxy changed?)", kpEvents, want)
			}
			t.Logf("kube-proxy recorded the event this time: %v", len(kpEvents) > 0)
			kxOut, kxEvents := run("kproxy", bin, 10*time.Second)
			if !slices.Equal(kxEvents, want) {
				t.Errorf("kproxy's Warning events on the Node:\n%s\nwant kube-proxy's:\n%s", strings.Join(kxEvents, "\n"), strings.Join(want, "\n"))
			}
			if wantErr := "Error: --" + busy.name + "-bind-address: " + busy.name + " server: listening on " + busy.addr; !strings.Contains(kxOut, wantErr) {
				t.Errorf("kproxy's output lacks %q:\n%s", wantErr, kxOut)
			}
		})
	}
}
