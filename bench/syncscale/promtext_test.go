package syncscale

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scrape mixes kube-proxy's labelled series with kproxy's unlabelled ones.
const scrape = `# HELP kubeproxy_sync_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds
# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.001"} 0
kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family="IPv4"} 751.25
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1
kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family="IPv6"} 0.5
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv6"} 3
kubeproxy_sync_full_proxy_rules_duration_seconds_sum 2.5
kubeproxy_sync_full_proxy_rules_duration_seconds_count 2 1700000000000
odd_labels{a="x\"y",b="1,2}",c="line\nbreak"} 7
`

func TestParseSamples(t *testing.T) {
	ss, err := ParseSamples(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 8 {
		t.Fatalf("parsed %d samples, want 8: %+v", len(ss), ss)
	}
	odd := ss[len(ss)-1]
	if diff := cmp.Diff(Sample{Name: "odd_labels", Labels: map[string]string{"a": `x"y`, "b": "1,2}", "c": "line\nbreak"}, Value: 7}, odd); diff != "" {
		t.Errorf("escaped labels (-want +got):\n%s", diff)
	}

	tests := []struct {
		name   string
		metric string
		match  func(map[string]string) bool
		want   Histogram
	}{
		{"kube-proxy IPv4 only", SyncDuration, IPv4, Histogram{Count: 1, Sum: 751.25}},
		{"kube-proxy both families", SyncDuration, AnyFamily, Histogram{Count: 4, Sum: 751.75}},
		{"unlabelled counts as IPv4", FullSyncDuration, IPv4, Histogram{Count: 2, Sum: 2.5}},
		{"absent is zero", PartialSyncDuration, AnyFamily, Histogram{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ss.Histogram(tt.metric, tt.match); got != tt.want {
				t.Errorf("Histogram(%s) = %+v, want %+v", tt.metric, got, tt.want)
			}
		})
	}
	if d := (Histogram{Count: 5, Sum: 3}).Since(Histogram{Count: 2, Sum: 1}); d != (Histogram{Count: 3, Sum: 2}) {
		t.Errorf("Since = %+v", d)
	}
}

func TestParseSamplesRejectsGarbage(t *testing.T) {
	for _, in := range []string{
		"no_value\n",
		`name{a="1"`,
		`name{a=1} 2`,
		"name one\n",
		"name 1 2 3\n",
	} {
		if ss, err := ParseSamples(strings.NewReader(in)); err == nil {
			t.Errorf("ParseSamples(%q) = %+v, want an error", in, ss)
		}
	}
}
