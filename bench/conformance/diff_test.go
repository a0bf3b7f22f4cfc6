package conformance

import (
	"path/filepath"
	"slices"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
)

// withResult returns r with spec's result under proxy set to res ("" drops
// the spec).
func withResult(r Report, proxy, spec string, res Result) Report {
	out := r
	out.Proxies = nil
	for _, p := range r.Proxies {
		specs := []SpecJSON{}
		for _, s := range p.Specs {
			if p.Name == proxy && s.Name == spec {
				if res == "" {
					continue
				}
				s.Result = res
			}
			specs = append(specs, s)
		}
		p.Specs = specs
		out.Proxies = append(out.Proxies, p)
	}
	return out
}

func TestCompare(t *testing.T) {
	base := sampleReport()
	tests := []struct {
		name     string
		old, new Report
		want     []Change
	}{
		{name: "the same run", old: base, new: base},
		{
			name: "a fix and a regression",
			old:  base,
			new:  withResult(withResult(base, "kproxy-userspace-local", affinity, Passed), "kproxy-iptables", basic, Failed),
			want: []Change{
				{Proxy: "kproxy-iptables", Spec: basic, Old: Passed, New: Failed},
				{Proxy: "kproxy-userspace-local", Spec: affinity, Old: Failed, New: Passed},
			},
		},
		{
			name: "a spec only one run reached",
			old:  withResult(base, "kproxy-iptables", three, ""),
			new:  base,
			want: []Change{{Proxy: "kproxy-iptables", Spec: three, Old: "", New: Passed}},
		},
		{
			name: "a configuration only the old run took",
			old:  base,
			new:  Report{Proxies: base.Proxies[1:]},
			want: []Change{
				{Proxy: "kproxy-iptables", Spec: three, Old: Passed, New: ""},
				{Proxy: "kproxy-iptables", Spec: affinity, Old: Passed, New: ""},
				{Proxy: "kproxy-iptables", Spec: basic, Old: Passed, New: ""},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Compare(tt.old, tt.new)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Compare =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestRenderChanges(t *testing.T) {
	tests := []struct {
		name    string
		changes []Change
	}{
		{"none", nil},
		{"some", []Change{
			{Proxy: "kproxy-iptables", Spec: basic, Old: Passed, New: Failed},
			{Proxy: "kproxy-nftables", Spec: three, Old: "", New: Skipped},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.Golden(t, filepath.Join("testdata", "changes-"+tt.name+".golden"), RenderChanges(tt.changes))
		})
	}
}
