package iptables

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/netfilter/nfacct"
)

// ensureNFAcct creates the accounting objects kube-proxy's rules count in
// and says which exist: the rules count in those, as kube-proxy's do (a
// rule naming a missing object would make the whole restore fail).
func ensureNFAcct(logger klog.Logger, c nfacct.Client) rules.NFAcct {
	ensure := func(name string) bool {
		err := c.Ensure(name)
		switch {
		case errors.Is(err, nfacct.ErrUnsupported):
			logger.V(2).Info("No nfacct counter; its metric is not reported", "counter", name, "reason", err)
		case err != nil:
			logger.Error(err, "Could not create an nfacct counter; its metric is not reported", "counter", name)
		}
		return err == nil
	}
	return rules.NFAcct{
		CTStateInvalidDropped:      ensure(nfacct.CTStateInvalidDropped),
		LocalhostNodePortsAccepted: ensure(nfacct.LocalhostNodePortAccept),
	}
}

// nfacctCollector reports kube-proxy's two packet counters from their
// accounting objects, read at each scrape.
type nfacctCollector struct {
	client nfacct.Client
	logger klog.Logger
	descs  map[string]*prometheus.Desc
}

func newNFAcctCollector(logger klog.Logger, c nfacct.Client, have rules.NFAcct) *nfacctCollector {
	col := &nfacctCollector{client: c, logger: logger, descs: map[string]*prometheus.Desc{}}
	if have.CTStateInvalidDropped {
		col.descs[nfacct.CTStateInvalidDropped] = prometheus.NewDesc("kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
			"packets dropped by iptables to work around conntrack problems", nil, nil)
	}
	if have.LocalhostNodePortsAccepted {
		col.descs[nfacct.LocalhostNodePortAccept] = prometheus.NewDesc("kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
			"Number of packets accepted on nodeports of loopback interface", nil, nil)
	}
	return col
}

func (c *nfacctCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *nfacctCollector) Collect(ch chan<- prometheus.Metric) {
	for name, d := range c.descs {
		counter, err := c.client.Get(name)
		if err != nil {
			c.logger.V(2).Info("Could not read an nfacct counter", "counter", name, "err", err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(counter.Packets))
	}
}
