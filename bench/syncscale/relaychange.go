package syncscale

import (
	"context"
	"fmt"
	"strconv"
)

// EndpointChangesPending is kube-proxy's gauge of endpoint changes received
// but not yet synced.
const EndpointChangesPending = "kubeproxy_sync_proxy_rules_endpoint_changes_pending"

// relayVersion is the userspace mode's side of NATVersion: nothing in the
// kernel moves when an endpoint changes (the relays' balancers hold the
// endpoints), so the version is the proxy's sync count, read from its
// metrics, and a change is in once a sync has finished with no endpoint
// change pending.
type relayVersion struct{}

func (relayVersion) Read() (string, error) {
	ss, err := Scrape(context.Background(), MetricsURL)
	if err != nil {
		return "", err
	}
	return strconv.FormatFloat(ss.Histogram(SyncDuration, AnyFamily).Count, 'f', -1, 64), nil
}

func (relayVersion) Close() error { return nil }

// newRelayChangeProbe is measureChange's probe for the userspace mode: the
// sync count moved (measureChange starts from a quiet proxy, so the first
// sync after the update is the one that took it) and nothing is pending.
func newRelayChangeProbe() *changeProbe {
	return &changeProbe{version: relayVersion{}, present: func(ctx context.Context) (bool, string, error) {
		ss, err := Scrape(ctx, MetricsURL)
		if err != nil {
			return false, "", err
		}
		pending, ok := ss.Sum(EndpointChangesPending, AnyFamily)
		if !ok {
			return false, "", fmt.Errorf("the proxy exports no %s", EndpointChangesPending)
		}
		return pending == 0, fmt.Sprintf("%s %v", EndpointChangesPending, pending), nil
	}}
}
