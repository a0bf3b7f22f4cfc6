package syncscale

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
)

// versionPoll is how often measureChange reads the nat table's version:
// the one-change resolution.
const versionPoll = 2 * time.Millisecond

// measureChange adds ChangeEndpoint to the middle service and times it
// until the nat table holds the service chain's jump to the endpoint's
// chain: it watches the table's version, and lists the chain with
// iptables -S whenever the version moves. The time is when the version
// that holds the rule was first seen.
func (l *RowLab) measureChange(ctx context.Context, proc *lab.Process, m *Measured) error {
	before, err := l.waitQuiet(ctx, proc)
	if err != nil {
		return err
	}
	i := ChangedService(l.Spec.Services)
	name := PortNameOf(ServiceName(i))
	svcChain, want := rules.ServiceChain(name), "-j "+rules.EndpointChain(name, ChangeEndpoint())+"\n"

	sliceAPI := l.Client.DiscoveryV1().EndpointSlices(Namespace)
	changed := NewSlice(ServiceName(i), append(BulkEndpoints(i), ChangeEndpoint().Addr()))
	current, err := sliceAPI.Get(ctx, changed.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading endpoint slice %s: %w", changed.Name, err)
	}
	changed.ResourceVersion = current.ResourceVersion
	version, err := OpenNATVersion(l.Spec.Backend)
	if err != nil {
		return err
	}
	defer version.Close()
	seen, err := version.Read()
	if err != nil {
		return err
	}

	t0 := time.Now()
	if _, err := sliceAPI.Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("adding endpoint %s to slice %s: %w", ChangeEndpoint(), changed.Name, err)
	}
	deadline := t0.Add(l.Settings.KproxyBudget + l.Settings.KubeProxyBudget)
	var lastList string
	for {
		v, err := version.Read()
		if err != nil {
			return err
		}
		if v != seen {
			at := time.Now()
			seen = v
			m.Commits++
			out, err := ListChain(ctx, l.Spec.Backend, svcChain)
			if err == nil && strings.Contains(out, want) {
				m.Change = at.Sub(t0)
				break
			}
			lastList = fmt.Sprintf("%s (%v)", strings.TrimSpace(out), err)
		}
		if err := alive(proc); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never showed %q after %d nat table commits; last listing: %s", svcChain, strings.TrimSpace(want), m.Commits, lastList)
		}
		time.Sleep(versionPoll)
	}

	// The rule is in; the sync that wrote it is counted when it returns.
	after, err := l.waitSyncs(ctx, before, time.Now().Add(metricsLag))
	if err != nil {
		return err
	}
	partial := after.Histogram(PartialSyncDuration, AnyFamily).Since(before.Histogram(PartialSyncDuration, AnyFamily))
	full := after.Histogram(FullSyncDuration, AnyFamily).Since(before.Histogram(FullSyncDuration, AnyFamily))
	m.ChangeHist, m.ChangeHistSyncs = fromSeconds(partial.Sum), int(partial.Count)
	if full.Count > 0 {
		m.ChangeWasFull = true
		m.ChangeHist, m.ChangeHistSyncs = fromSeconds(full.Sum), int(full.Count)
	}
	return nil
}
