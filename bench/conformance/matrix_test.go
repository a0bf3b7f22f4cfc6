package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/testkit"
)

const (
	basic    = "[sig-network] Services should serve a basic endpoint from pods [Conformance]"
	affinity = "[sig-network] Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]"
	three    = "[sig-network] Services should be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is true"
)

// sampleReport is a run of three specs under four configurations: one
// passing all, one failing one and skipping one, one not run, one
// stopped short.
func sampleReport() Report {
	return Report{
		Schema: SchemaVersion,
		Header: Header{Date: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), Kernel: "6.1.0-test", Cores: 2,
			Commit: "0123abc", Command: "make conformance CONFORMANCE_SPECS=services", Nodes: 3,
			Focus: ServicesFocus, Skip: DefaultSkip},
		Proxies: []ProxyRun{
			{Name: "kproxy-iptables", Seconds: 125, Specs: []SpecJSON{
				{Name: basic, Result: Passed, Seconds: 10},
				{Name: affinity, Result: Passed, Seconds: 30},
				{Name: three, Result: Passed, Seconds: 20},
			}},
			{Name: "kproxy-userspace-local", Seconds: 190.4, Specs: []SpecJSON{
				{Name: basic, Result: Passed, Seconds: 11},
				{Name: affinity, Result: Failed, Seconds: 300, Message: "[FAILED] affinity | broken"},
				{Name: three, Result: Skipped, Message: "needs 3 nodes"},
			}},
			{Name: "kproxy-ipvs", NotRun: "not run: no IPVS in this kernel"},
			{Name: "kube-proxy-iptables", Seconds: 20, Error: "kube-proxy-iptables ready on every node: not after 3m0s"},
		},
	}
}

func TestReportMarkdown(t *testing.T) {
	testkit.Golden(t, filepath.Join("testdata", "matrix.md.golden"), sampleReport().Markdown())
}

func TestReportJSONRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "conformance.json")
	want := sampleReport()
	if err := want.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Golden(t, filepath.Join("testdata", "matrix.json.golden"), string(data))
	got, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Markdown() != want.Markdown() {
		t.Errorf("read back, the report renders differently:\n%s\nwant:\n%s", got.Markdown(), want.Markdown())
	}
}

func TestReadReportRefuses(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"another schema", `{"schema": 99}`, "schema version 99"},
		{"no schema", `{}`, "schema version 0"},
		{"not JSON", `<testsuites/>`, "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadReport(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadReport = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestFailed(t *testing.T) {
	passing := Report{Proxies: []ProxyRun{{Name: "a", Specs: []SpecJSON{{Name: basic, Result: Passed}, {Name: three, Result: Skipped}}},
		{Name: "b", NotRun: "no IPVS"}}}
	tests := []struct {
		name string
		r    Report
		want bool
	}{
		{"passed, skipped and not run", passing, false},
		{"a failed spec", sampleReport(), true},
		{"stopped short", Report{Proxies: []ProxyRun{{Name: "a", Error: "rollout"}}}, true},
	}
	for _, tt := range tests {
		if got := tt.r.Failed(); got != tt.want {
			t.Errorf("%s: Failed() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMerge(t *testing.T) {
	first := sampleReport()
	later := Report{Schema: SchemaVersion, Header: first.Header, Proxies: []ProxyRun{
		{Name: "kproxy-userspace-local", Seconds: 100, Specs: []SpecJSON{
			{Name: basic, Result: Passed}, {Name: affinity, Result: Passed}, {Name: three, Result: Passed},
		}},
		{Name: "kproxy-nftables", Seconds: 90, Specs: []SpecJSON{{Name: basic, Result: Passed}}},
	}}
	later.Header.Date = first.Header.Date.Add(time.Hour)
	later.Header.Commit = "4567def"
	later.Header.Command = "make conformance CONFORMANCE_PROXIES=kproxy-userspace-local,kproxy-nftables"

	// Given in either order, the later run wins.
	for _, order := range [][]Report{{first, later}, {later, first}} {
		got, err := Merge(order...)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range got.Proxies {
			names = append(names, p.Name)
		}
		if want := "kproxy-iptables kproxy-userspace-local kproxy-ipvs kube-proxy-iptables kproxy-nftables"; strings.Join(names, " ") != want {
			t.Errorf("configurations %v, want %s", names, want)
		}
		if p := got.Proxies[1]; p.Seconds != 100 || p.counts()[Failed] != 0 {
			t.Errorf("kproxy-userspace-local is %+v, want the later run's", p)
		}
		if got.Header.Date != later.Header.Date || got.Header.Commit != "0123abc, 4567def" ||
			!strings.Contains(got.Header.Command, first.Header.Command) || !strings.Contains(got.Header.Command, later.Header.Command) {
			t.Errorf("header %+v, want the later date and both commits and commands", got.Header)
		}
	}

	other := later
	other.Header.Focus = WideFocus
	if _, err := Merge(first, other); err == nil || !strings.Contains(err.Error(), "other specs") {
		t.Errorf("merging runs of other specs: %v, want an error", err)
	}
	if _, err := Merge(); err == nil {
		t.Error("merging nothing succeeded")
	}
}
