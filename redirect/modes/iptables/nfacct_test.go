package iptables

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/netfilter/nfacct"
)

// fakeNFAcct holds counters in memory and fails as the kernel would.
type fakeNFAcct struct {
	ensureErr map[string]error
	packets   map[string]uint64
}

func (f *fakeNFAcct) Ensure(name string) error { return f.ensureErr[name] }

func (f *fakeNFAcct) Get(name string) (nfacct.Counter, error) {
	if f.ensureErr[name] != nil {
		return nfacct.Counter{}, fmt.Errorf("reading nfacct object %s: no such file or directory", name)
	}
	return nfacct.Counter{Name: name, Packets: f.packets[name]}, nil
}

func TestNFAcctCounters(t *testing.T) {
	tests := []struct {
		name        string
		ensureErr   map[string]error
		want        rules.NFAcct
		wantMetrics string
	}{
		{"kernel has nfacct", nil, rules.NFAcct{CTStateInvalidDropped: true, LocalhostNodePortsAccepted: true}, `
# HELP kubeproxy_iptables_ct_state_invalid_dropped_packets_total packets dropped by iptables to work around conntrack problems
# TYPE kubeproxy_iptables_ct_state_invalid_dropped_packets_total counter
kubeproxy_iptables_ct_state_invalid_dropped_packets_total 7
# HELP kubeproxy_iptables_localhost_nodeports_accepted_packets_total Number of packets accepted on nodeports of loopback interface
# TYPE kubeproxy_iptables_localhost_nodeports_accepted_packets_total counter
kubeproxy_iptables_localhost_nodeports_accepted_packets_total 3
`},
		{"kernel without nfacct", map[string]error{nfacct.CTStateInvalidDropped: nfacct.ErrUnsupported, nfacct.LocalhostNodePortAccept: nfacct.ErrUnsupported}, rules.NFAcct{}, ""},
		{"one object refused", map[string]error{nfacct.LocalhostNodePortAccept: errors.New("operation not permitted")}, rules.NFAcct{CTStateInvalidDropped: true}, `
# HELP kubeproxy_iptables_ct_state_invalid_dropped_packets_total packets dropped by iptables to work around conntrack problems
# TYPE kubeproxy_iptables_ct_state_invalid_dropped_packets_total counter
kubeproxy_iptables_ct_state_invalid_dropped_packets_total 7
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeNFAcct{ensureErr: tc.ensureErr, packets: map[string]uint64{nfacct.CTStateInvalidDropped: 7, nfacct.LocalhostNodePortAccept: 3}}
			got := ensureNFAcct(klog.Background(), c)
			if got != tc.want {
				t.Errorf("ensureNFAcct = %+v, want %+v", got, tc.want)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(newNFAcctCollector(klog.Background(), c, got))
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.wantMetrics)); err != nil {
				t.Error(err)
			}
		})
	}
}
