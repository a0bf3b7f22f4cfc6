package iptables

import (
	"strings"
	"testing"

	"kproxy.dev/kproxy/sync/servicemap"
)

// TestRulesLastSync: kubeproxy_sync_proxy_rules_iptables_last is, per table,
// the number of rules the last sync restored, as kube-proxy counts the rule
// lines of its restore input: every rule after a full sync, only the
// changed port's after a partial one.
func TestRulesLastSync(t *testing.T) {
	h := newHarness(t, 0)
	a, b := name("a", "http"), name("b", "http")
	ports := []*servicemap.ServicePort{svc(a, "198.18.0.1", 11), svc(b, "198.18.0.2", 12)}
	last := func(table string) float64 {
		t.Helper()
		families, err := h.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "kubeproxy_sync_proxy_rules_iptables_last" {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["table"] == table && labels["ip_family"] == "IPv4" {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("kubeproxy_sync_proxy_rules_iptables_last{table=%q,ip_family=IPv4} is not registered", table)
		return 0
	}
	rulesIn := func(from int) map[string]int {
		counts := map[string]int{}
		for _, r := range h.fake.Restores()[from:] {
			table := ""
			for line := range strings.SplitSeq(r.Payload, "\n") {
				if strings.HasPrefix(line, "*") {
					table = line[1:]
				} else if strings.HasPrefix(line, "-A ") {
					counts[table]++
				}
			}
		}
		return counts
	}

	if err := h.sync(t, true, nil, nil, ports...); err != nil {
		t.Fatal(err)
	}
	full := rulesIn(0)
	if full["nat"] == 0 {
		t.Fatal("the full sync restored no nat rule")
	}
	for _, table := range []string{"nat", "filter"} {
		if got := last(table); got != float64(full[table]) {
			t.Errorf("after the full sync, iptables_last{table=%q} = %v, want %d", table, got, full[table])
		}
	}

	before := len(h.fake.Restores())
	ports[0] = svc(a, "198.18.0.1", 11, 13)
	if err := h.sync(t, false, []servicemap.ServicePortName{a}, nil, ports...); err != nil {
		t.Fatal(err)
	}
	partial := rulesIn(before)
	if partial["nat"] == 0 || partial["nat"] >= full["nat"] {
		t.Fatalf("the partial sync restored %d nat rules, want some but fewer than the full sync's %d", partial["nat"], full["nat"])
	}
	if got := last("nat"); got != float64(partial["nat"]) {
		t.Errorf("after the partial sync, iptables_last{table=nat} = %v, want %d", got, partial["nat"])
	}
}
