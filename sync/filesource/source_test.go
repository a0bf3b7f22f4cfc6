package filesource

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/servicemap/sinktest"
)

// TestReloadSteps drives one directory through a series of edits, reading
// after each one, and checks what the sink was told, what it holds, the
// errors and the metrics. Steps depend on the ones before them.
func TestReloadSteps(t *testing.T) {
	const nodeName = "kproxy-demo"
	web := service("default", "web", "198.18.0.10", 80)
	webSlice := endpointSlice("default", "web-1", "web", "198.19.1.1", "198.19.1.2")
	dns := service("kube-system", "dns", "198.18.0.53", 53)
	dnsSlice := endpointSlice("kube-system", "dns-1", "dns", "198.19.1.53")
	api := service("default", "api", "198.18.0.40", 443)
	webOn := func(port int32) *v1.Service { return service("default", "web", "198.18.0.10", port) }

	steps := []struct {
		name        string
		change      func(t *testing.T, dir string)
		wantEvents  []string
		wantState   []string
		wantErrs    []string
		wantInvalid float64 // kproxy_services_file_invalid_documents after the step
	}{{
		name: "initial load of several files, multi-document YAML and a JSON List",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", yamlDocs(t, web, webSlice))
			writeFile(t, dir, "b.yaml", yamlDocs(t, dns, dnsSlice))
			writeFile(t, dir, "c.json", jsonList(t, api))
			writeFile(t, dir, "nodes.yml", yamlDocs(t, node("other", "198.19.0.2"), node(nodeName, "198.19.0.1")))
			writeFile(t, dir, "README.md", "not a manifest: ignored")
		},
		wantEvents: []string{
			"update Node kproxy-demo",
			"update Service default/api", "update Service default/web", "update Service kube-system/dns",
			"update EndpointSlice default/web-1", "update EndpointSlice kube-system/dns-1",
		},
		wantState: []string{
			"EndpointSlice default/web-1 198.19.1.1,198.19.1.2", "EndpointSlice kube-system/dns-1 198.19.1.53",
			"Node kproxy-demo",
			"Service default/api 198.18.0.40:443", "Service default/web 198.18.0.10:80", "Service kube-system/dns 198.18.0.53:53",
		},
	}, {
		name:       "re-reading unchanged files sends nothing",
		change:     func(t *testing.T, dir string) {},
		wantEvents: nil,
	}, {
		name: "editing one object re-sends only that object",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", yamlDocs(t, webOn(8080), webSlice))
		},
		wantEvents: []string{"update Service default/web"},
	}, {
		name: "an invalid document keeps its last good version; the others still apply",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", yamlDocs(t, webOn(70000), endpointSlice("default", "web-1", "web", "198.19.1.1")))
		},
		wantEvents: []string{"update EndpointSlice default/web-1"},
		wantState: []string{
			"EndpointSlice default/web-1 198.19.1.1", "EndpointSlice kube-system/dns-1 198.19.1.53",
			"Node kproxy-demo",
			"Service default/api 198.18.0.40:443", "Service default/web 198.18.0.10:8080", "Service kube-system/dns 198.18.0.53:53",
		},
		wantErrs:    []string{"a.yaml: document 1 at line 1 (Service default/web): spec.ports[0].port: 70000 is not a valid port (1-65535)"},
		wantInvalid: 1,
	}, {
		name:        "a document that stays invalid is rejected again on each read",
		change:      func(t *testing.T, dir string) {},
		wantErrs:    []string{"a.yaml: document 1 at line 1 (Service default/web): spec.ports[0].port: 70000 is not a valid port (1-65535)"},
		wantInvalid: 1,
	}, {
		name: "fixing the document applies it",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", yamlDocs(t, webOn(81), endpointSlice("default", "web-1", "web", "198.19.1.1")))
		},
		wantEvents: []string{"update Service default/web"},
	}, {
		name: "undecodable YAML keeps the object last seen at that position",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "b.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: dns\n---\n"+yamlDocs(t, endpointSlice("kube-system", "dns-1", "dns", "198.19.1.54")))
		},
		wantEvents: []string{"update EndpointSlice kube-system/dns-1"},
		wantState: []string{
			"EndpointSlice default/web-1 198.19.1.1", "EndpointSlice kube-system/dns-1 198.19.1.54",
			"Node kproxy-demo",
			"Service default/api 198.18.0.40:443", "Service default/web 198.18.0.10:81", "Service kube-system/dns 198.18.0.53:53",
		},
		wantErrs:    []string{"b.yaml: document 1 at line 1: invalid YAML: line 3: did not find expected ',' or '}'"},
		wantInvalid: 1,
	}, {
		name: "unsupported kind, unknown field and a slice without its label are each rejected",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "e.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
---
apiVersion: v1
kind: Service
metadata: {name: typo}
spec: {clusterIP: 198.18.0.9, ports: [{port: 80}], selectr: {app: x}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: foo-abc}
addressType: IPv4
`)
		},
		wantErrs: []string{
			"b.yaml: document 1 at line 1: invalid YAML: line 3: did not find expected ',' or '}'",
			"e.yaml: document 1 at line 1 (Deployment default/app): kind Deployment is not supported; a services file holds Service, EndpointSlice and Node objects",
			`e.yaml: document 2 at line 5 (Service default/typo): unknown field "spec.selectr"`,
			"e.yaml: document 3 at line 10 (EndpointSlice default/foo-abc): metadata.labels: EndpointSlice default/foo-abc has no kubernetes.io/service-name label; kproxy cannot tell which Service it belongs to",
		},
		wantInvalid: 4,
	}, {
		name: "deleting a file deletes its objects, even one whose document was invalid",
		change: func(t *testing.T, dir string) {
			removeFile(t, dir, "b.yaml")
			removeFile(t, dir, "e.yaml")
		},
		wantEvents: []string{"delete Service kube-system/dns", "delete EndpointSlice kube-system/dns-1"},
	}, {
		name: "deleting a document deletes its object",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", yamlDocs(t, webOn(81)))
		},
		wantEvents: []string{"delete EndpointSlice default/web-1"},
	}, {
		name: "renaming an object deletes the old name",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "c.json", jsonList(t, service("default", "api2", "198.18.0.40", 443)))
		},
		wantEvents: []string{"delete Service default/api", "update Service default/api2"},
	}, {
		name: "a duplicate object is an error on the later document",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "d.yaml", yamlDocs(t, service("default", "web", "198.18.0.99", 99), service("default", "new", "198.18.0.5", 5)))
		},
		wantEvents: []string{"update Service default/new"},
		wantState: []string{
			"Node kproxy-demo",
			"Service default/api2 198.18.0.40:443", "Service default/new 198.18.0.5:5", "Service default/web 198.18.0.10:81",
		},
		wantErrs:    []string{"d.yaml: document 1 at line 1 (Service default/web): duplicate object: already defined in a.yaml document 1"},
		wantInvalid: 1,
	}, {
		name: "an unreadable file keeps its objects",
		change: func(t *testing.T, dir string) {
			removeFile(t, dir, "d.yaml")
			if err := os.Symlink("d.yaml", filepath.Join(dir, "d.yaml")); err != nil { // a symlink loop
				t.Fatal(err)
			}
		},
		wantErrs: []string{"d.yaml: cannot read: open " + "DIR/d.yaml: too many levels of symbolic links"},
	}, {
		name: "other nodes are ignored; this node's removal is seen",
		change: func(t *testing.T, dir string) {
			removeFile(t, dir, "d.yaml")
			writeFile(t, dir, "nodes.yml", yamlDocs(t, node("other", "198.19.0.3")))
		},
		wantEvents: []string{"delete Node", "delete Service default/new"},
		wantState: []string{
			"Service default/api2 198.18.0.40:443", "Service default/web 198.18.0.10:81",
		},
	}, {
		name: "emptying the directory deletes everything",
		change: func(t *testing.T, dir string) {
			for _, f := range []string{"a.yaml", "c.json", "nodes.yml"} {
				removeFile(t, dir, f)
			}
		},
		wantEvents: []string{"delete Service default/api2", "delete Service default/web"},
		wantState:  nil,
	}}

	dir := t.TempDir()
	sink := sinktest.New()
	reg := prometheus.NewRegistry()
	src, err := New(dir, nodeName, sink, reg)
	if err != nil {
		t.Fatal(err)
	}
	var wantRejected float64
	for i, st := range steps {
		st.change(t, dir)
		src.reload(klog.Background())

		if diff := cmp.Diff(st.wantEvents, sink.Take()); diff != "" {
			t.Errorf("step %d %q: sink calls (-want +got):\n%s", i, st.name, diff)
		}
		if st.wantState != nil || i == len(steps)-1 {
			if diff := cmp.Diff(st.wantState, contents(sink)); diff != "" {
				t.Errorf("step %d %q: sink contents (-want +got):\n%s", i, st.name, diff)
			}
		}
		var gotErrs []string
		for _, err := range src.Errors() {
			gotErrs = append(gotErrs, strings.ReplaceAll(err.Error(), dir, "DIR"))
		}
		if diff := cmp.Diff(st.wantErrs, gotErrs); diff != "" {
			t.Errorf("step %d %q: errors (-want +got):\n%s", i, st.name, diff)
		}

		wantRejected += st.wantInvalid
		if got := testutil.ToFloat64(src.metrics.rejected); got != wantRejected {
			t.Errorf("step %d %q: rejected documents total %v, want %v", i, st.name, got, wantRejected)
		}
		if got := testutil.ToFloat64(src.metrics.invalid); got != st.wantInvalid {
			t.Errorf("step %d %q: invalid documents %v, want %v", i, st.name, got, st.wantInvalid)
		}
		result := "success"
		if len(st.wantErrs) > 0 {
			result = "error"
		}
		before := testutil.ToFloat64(src.metrics.reloads.WithLabelValues(result))
		if before < 1 {
			t.Errorf("step %d %q: reloads_total{result=%q} is %v, want at least 1", i, st.name, result, before)
		}
	}
	if src.Generation() != uint64(len(steps)) {
		t.Errorf("generation %d after %d reloads", src.Generation(), len(steps))
	}

	// The registry exposes the three metrics under their names.
	for name, series := range map[string]int{
		"kproxy_services_file_rejected_documents_total": 1,
		"kproxy_services_file_invalid_documents":        1,
		"kproxy_services_file_reloads_total":            2,
	} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != series {
			t.Errorf("registry has %d series of %s (err %v), want %d", n, name, err, series)
		}
	}
}

// TestReloadResultCounts checks the reloads_total labels exactly over a
// good, a bad and a good read.
func TestReloadResultCounts(t *testing.T) {
	dir := t.TempDir()
	src, err := New(dir, "n", sinktest.New(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{validService, "kind: Nonsense\n", validService} {
		writeFile(t, dir, "s.yaml", content)
		src.reload(klog.Background())
	}
	if got := testutil.ToFloat64(src.metrics.reloads.WithLabelValues("success")); got != 2 {
		t.Errorf("successful reloads %v, want 2", got)
	}
	if got := testutil.ToFloat64(src.metrics.reloads.WithLabelValues("error")); got != 1 {
		t.Errorf("failed reloads %v, want 1", got)
	}
}

func TestNewRejects(t *testing.T) {
	sink := sinktest.New()
	if _, err := New(filepath.Join(t.TempDir(), "missing.yaml"), "n", sink, nil); err == nil {
		t.Error("New accepted a path that does not exist")
	}
	reg := prometheus.NewRegistry()
	if _, err := New(t.TempDir(), "n", sink, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(t.TempDir(), "n", sink, reg); err == nil || !strings.Contains(err.Error(), "registering services-file metrics") {
		t.Errorf("second registration on one registry: err %v, want a registration error", err)
	}
}

// watchHarness runs a Source and lets a test wait for the sink to reach a state.
type watchHarness struct {
	t       *testing.T
	sink    *sinktest.Recorder
	src     *Source
	reloads chan ReloadResult
	done    chan error
}

func startWatching(t *testing.T, path string, opts ...Option) *watchHarness {
	t.Helper()
	h := &watchHarness{t: t, sink: sinktest.New(), reloads: make(chan ReloadResult, 100), done: make(chan error, 1)}
	opts = append([]Option{WithDebounce(20 * time.Millisecond), WithReloadHook(func(r ReloadResult) { h.reloads <- r })}, opts...)
	src, err := New(path, "kproxy-demo", h.sink, prometheus.NewRegistry(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	h.src = src
	ctx, cancel := context.WithCancel(context.Background())
	go func() { h.done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		// Run may be handing the hook a reload nobody waits for any more
		// (a test that stopped reading, a resync every few milliseconds):
		// take them until it returns. The timeout only bounds a hang.
		timeout := time.After(time.Minute)
		for {
			select {
			case err := <-h.done:
				if err != nil {
					t.Errorf("Run returned %v after cancellation", err)
				}
				return
			case <-h.reloads:
			case <-timeout:
				t.Error("Run did not return after cancellation")
				return
			}
		}
	})
	return h
}

// waitReload waits for the next reload to finish.
func (h *watchHarness) waitReload() ReloadResult {
	h.t.Helper()
	select {
	case r := <-h.reloads:
		return r
	case <-time.After(10 * time.Second):
		h.t.Fatal("no reload")
		return ReloadResult{}
	}
}

// waitFor consumes reloads until the sink holds want. The timeout only
// bounds a failing test.
func (h *watchHarness) waitFor(what string, want []string) {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if cmp.Equal(want, contents(h.sink)) {
			return
		}
		select {
		case <-h.reloads:
		case <-deadline:
			h.t.Fatalf("%s: sink never reached the expected state (-want +got):\n%s", what, cmp.Diff(want, contents(h.sink)))
		}
	}
}

func TestWatchDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", yamlDocs(t, service("default", "web", "198.18.0.10", 80)))
	h := startWatching(t, dir)
	h.waitReload()
	h.waitFor("initial load", []string{"Service default/web 198.18.0.10:80"})
	if ev := h.sink.Take(); !cmp.Equal(ev, []string{"update Service default/web", "synced"}) {
		t.Errorf("initial calls %q, want the update then synced", ev)
	}

	writeFile(t, dir, "web.yaml", yamlDocs(t, service("default", "web", "198.18.0.10", 81)))
	h.waitFor("in-place edit", []string{"Service default/web 198.18.0.10:81"})

	replaceFile(t, dir, "web.yaml", yamlDocs(t, service("default", "web", "198.18.0.10", 82)))
	h.waitFor("rename over the file", []string{"Service default/web 198.18.0.10:82"})

	writeFile(t, dir, "dns.yml", yamlDocs(t, service("default", "dns", "198.18.0.53", 53)))
	h.waitFor("new file", []string{"Service default/dns 198.18.0.53:53", "Service default/web 198.18.0.10:82"})

	removeFile(t, dir, "web.yaml")
	h.waitFor("file removed", []string{"Service default/dns 198.18.0.53:53"})

	if ev := h.sink.Take(); strings.Count(strings.Join(ev, "\n"), "synced") != 0 {
		t.Errorf("OnSynced called again after the initial load: %q", ev)
	}
}

func TestWatchSingleFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "services.yaml")
	writeFile(t, dir, "services.yaml", yamlDocs(t, service("default", "web", "198.18.0.10", 80), node("kproxy-demo", "198.19.0.1")))
	writeFile(t, dir, "other.yaml", yamlDocs(t, service("default", "other", "198.18.0.11", 80)))
	h := startWatching(t, path)
	h.waitFor("initial load", []string{"Node kproxy-demo", "Service default/web 198.18.0.10:80"})

	replaceFile(t, dir, "services.yaml", yamlDocs(t, service("default", "web", "198.18.0.10", 8080)))
	h.waitFor("editor save", []string{"Service default/web 198.18.0.10:8080"})

	// A truncating save leaves the file empty for a while: never applied.
	writeFile(t, dir, "services.yaml", "")
	for r := h.waitReload(); len(r.Errors) != 1 || !errors.Is(r.Errors[0], errEmpty); r = h.waitReload() {
		t.Logf("waiting for the emptied file's reload: %+v", r)
	}
	h.waitFor("emptied file", []string{"Service default/web 198.18.0.10:8080"})

	writeFile(t, dir, "services.yaml", "# no services\n")
	h.waitFor("file holding only a comment", nil)
}

// TestHarnessStopsRunBlockedInTheHook: when a test stops reading reloads
// (its body is done, or the machine is too busy to get to them), Run blocks
// handing the hook one once the harness's buffer is full; the harness must
// still stop it. Its cleanup used to wait for Run without reading, and gave
// up after 10 s with "Run did not return after cancellation".
func TestHarnessStopsRunBlockedInTheHook(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", validService)
	t.Run("a body that stops reading", func(t *testing.T) {
		h := startWatching(t, dir, WithResyncPeriod(time.Millisecond))
		// Wait until the buffer is full and Run is blocked in the hook.
		deadline := time.Now().Add(time.Minute)
		for len(h.reloads) < cap(h.reloads) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d reloads in a minute with a resync every millisecond", len(h.reloads))
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// TestPeriodicResync checks the safety net re-reads with no file event.
func TestPeriodicResync(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", validService)
	h := startWatching(t, dir, WithResyncPeriod(10*time.Millisecond))
	deadline := time.After(10 * time.Second)
	for gen := uint64(0); gen < 3; {
		select {
		case r := <-h.reloads:
			gen = r.Generation
		case <-deadline:
			t.Fatal("no periodic reloads")
		}
	}
	if ev := h.sink.Take(); !cmp.Equal(ev, []string{"update Service default/web", "synced"}) {
		t.Errorf("calls %q: periodic re-reads of unchanged files must not reach the sink", ev)
	}
}

// TestLoggedRejectionsAreCapped writes documents carrying 1 MiB of name,
// kind, field name, label value or garbage: every log line a reload writes
// about them stays short, and still names the file and document.
func TestLoggedRejectionsAreCapped(t *testing.T) {
	huge := strings.Repeat("a", 1<<20)
	cases := []struct{ name, data string }{
		{"object name", "apiVersion: v1\nkind: Service\nmetadata: {name: " + huge + "}\nspec: {clusterIP: 198.18.0.10, ports: [{port: 80}]}\n"},
		{"kind", "apiVersion: v1\nkind: " + huge + "\nmetadata: {name: web}\n"},
		{"unknown field", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 198.18.0.10, ports: [{port: 80}], " + huge + ": 1}\n"},
		{"label value", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, labels: {kubernetes.io/service-name: " + huge + "}}\naddressType: IPv4\n"},
		{"cluster IP", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: " + huge + ", ports: [{port: 80}]}\n"},
		{"garbage", "apiVersion: v1\nkind: Service\nmetadata: {name: \"" + huge + "\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "s.yaml", tc.data)
			src, err := New(dir, "n", sinktest.New(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			logger := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{})
			src.reload(logger)
			if len(src.Errors()) == 0 {
				t.Fatal("the document was not rejected")
			}
			for _, line := range lines {
				if len(line) > 2*maxLoggedMessage {
					t.Errorf("a log line of %d bytes: %.300s...", len(line), line)
				}
			}
			for _, err := range src.Errors() {
				if msg := err.Error(); !strings.HasPrefix(msg, "s.yaml: document 1") || len(msg) > 2*maxLoggedMessage {
					t.Errorf("error of %d bytes: %.300s...", len(msg), msg)
				}
			}
		})
	}
}

// TestFIFOSwappedInDoesNotBlock replaces the services file, over and over,
// with a FIFO and a regular file while reloads run: checking the type of the
// path before opening it left a window in which open(2) of the FIFO blocked
// the source for good. Every reload must finish.
func TestFIFOSwappedInDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "services.yaml")
	writeFile(t, dir, "services.yaml", validService)
	src, err := New(path, "n", sinktest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	swapped := make(chan error, 1)
	go func() {
		fifo, reg := filepath.Join(dir, ".fifo"), filepath.Join(dir, ".reg")
		for {
			select {
			case <-stop:
				swapped <- nil
				return
			default:
			}
			if err := unix.Mkfifo(fifo, 0o644); err != nil {
				swapped <- err
				return
			}
			if err := os.Rename(fifo, path); err != nil {
				swapped <- err
				return
			}
			if err := os.WriteFile(reg, []byte(validService), 0o644); err != nil {
				swapped <- err
				return
			}
			if err := os.Rename(reg, path); err != nil {
				swapped <- err
				return
			}
		}
	}()

	// A blocked open(2) never returns, while a busy machine only makes the
	// reloads slower: the test fails when no reload has finished for
	// stallBound, however long all of them take.
	const reloads = 50000
	const stallBound = 20 * time.Second
	var finished atomic.Int64
	allDone := make(chan struct{})
	go func() {
		defer close(allDone)
		for range reloads {
			src.reload(logr.Discard())
			finished.Add(1)
		}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	seen, seenAt := int64(0), time.Now()
	for running := true; running; {
		select {
		case <-allDone:
			running = false
		case now := <-tick.C:
			if n := finished.Load(); n != seen {
				seen, seenAt = n, now
				continue
			}
			if now.Sub(seenAt) < stallBound {
				continue
			}
			close(stop)
			// Unblock the stuck open(2) by opening the FIFO's other end.
			for range 100 {
				if f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Fatalf("a reload blocked: none finished for %v, %d of %d had", stallBound, seen, reloads)
		}
	}
	close(stop)
	if err := <-swapped; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d reloads while the file was swapped with a FIFO; errors of the last: %v", src.Generation(), src.Errors())
}

// TestSaveInProgressIsWaitedFor saves the file as an editor that does not
// save atomically, pausing far longer than the debounce between the
// truncation, the first half and the rest: no reload may apply the empty or
// the half-written file, which would delete what the missing half defines.
func TestSaveInProgressIsWaitedFor(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "services.yaml")
	a, b := service("default", "a", "198.18.0.10", 80), service("default", "b", "198.18.0.11", 80)
	content := yamlDocs(t, a, b)
	writeFile(t, dir, "services.yaml", content)
	h := startWatching(t, path)
	h.waitFor("initial load", []string{"Service default/a 198.18.0.10:80", "Service default/b 198.18.0.11:80"})
	h.sink.Take()

	const pause = 200 * time.Millisecond // ten debounce periods
	for i := range 3 {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		// The first half holds a whole, valid document: only the wait
		// keeps it from being applied.
		half := strings.Index(content, "---\n") + len("---\n")
		if _, err := f.WriteString(content[:half]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		if _, err := f.WriteString(content[half:]); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		if ev := h.sink.Take(); len(ev) > 0 {
			t.Fatalf("save %d: the sink was told %q while the file was being written", i+1, ev)
		}
	}
	h.waitFor("after the saves", []string{"Service default/a 198.18.0.10:80", "Service default/b 198.18.0.11:80"})
}

// TestReadLimits checks what is refused before it is read whole: a file
// over 32 MiB, a directory whose manifests exceed 64 MiB in all, a FIFO, a
// device. Each keeps its last good version.
func TestReadLimits(t *testing.T) {
	sparse := func(t *testing.T, path string, size int64) {
		t.Helper()
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{{
		name:  "a file over 32 MiB",
		setup: func(t *testing.T, dir string) { sparse(t, filepath.Join(dir, "big.yaml"), maxFileSize+1) },
		want:  []string{"big.yaml: cannot read: larger than 32 MiB"},
	}, {
		name: "manifests over 64 MiB in all",
		setup: func(t *testing.T, dir string) {
			sparse(t, filepath.Join(dir, "1.yaml"), maxFileSize)
			sparse(t, filepath.Join(dir, "2.yaml"), maxFileSize)
		},
		want: []string{"3.yaml: not read: the directory's manifests exceed 64 MiB in all"},
	}, {
		name: "a FIFO",
		setup: func(t *testing.T, dir string) {
			if err := unix.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{"fifo.yaml: cannot read: not a regular file but a FIFO"},
	}, {
		name: "a device",
		setup: func(t *testing.T, dir string) {
			if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{"zero.yaml: cannot read: not a regular file but a device"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "3.yaml", validService)
			sink := sinktest.New()
			src, err := New(dir, "n", sink, nil)
			if err != nil {
				t.Fatal(err)
			}
			src.reload(logr.Discard())
			tc.setup(t, dir)
			src.reload(logr.Discard())
			var got []string
			for _, err := range src.Errors() {
				if !strings.Contains(err.Error(), "document") { // the sparse files hold NULs: not YAML
					got = append(got, err.Error())
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"Service default/web 198.18.0.10:80"}, contents(sink)); diff != "" {
				t.Errorf("sink contents (-want +got):\n%s", diff)
			}
		})
	}
}
