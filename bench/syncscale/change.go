package syncscale

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/sync/servicemap"
)

// versionPoll is how often measureChange reads the nat table's version:
// the one-change resolution.
const versionPoll = 2 * time.Millisecond

// probeDoubt is how long the nftables probe may miss the change before
// nft is asked too (see measureChange).
const probeDoubt = 10 * time.Second

// changeProbe tells when the one change is in the kernel: Read is a
// version of the proxy's table that moves with every commit, cheap to read
// whatever its size; Present, asked after each move, checks the change
// itself and describes what it saw.
type changeProbe struct {
	version NATVersion
	present func(ctx context.Context) (bool, string, error)
	// confirm, when set, checks the change another way once present saw
	// it (untimed).
	confirm func(ctx context.Context) error
}

// newChangeProbe builds the probe for the row's mode and the endpoint
// added to service port name.
func (l *RowLab) newChangeProbe(name servicemap.ServicePortName) (*changeProbe, string, error) {
	if _, ok := l.Spec.Mode.Portals(); ok {
		return newRelayChangeProbe(), "the sync holding the change to finish", nil
	}
	if b, ok := l.Spec.Mode.Backend(); ok {
		// The iptables modes: the service chain jumps to the endpoint's
		// chain (iptables -S lists just that chain).
		svcChain, want := rules.ServiceChain(name), "-j "+rules.EndpointChain(name, ChangeEndpoint())+"\n"
		version, err := OpenNATVersion(b)
		if err != nil {
			return nil, "", err
		}
		return &changeProbe{version: version, present: func(ctx context.Context) (bool, string, error) {
			out, err := ListChain(ctx, b, svcChain)
			return err == nil && strings.Contains(out, want), strings.TrimSpace(out), err
		}}, fmt.Sprintf("%s to show %q", svcChain, strings.TrimSpace(want)), nil
	}
	// The nftables mode: the service chain's rule sends to the endpoint,
	// in kube-proxy v1.36 through a numgen map of "ip . port" values (an
	// anonymous map, rewritten with the chain). The chain's rules and
	// their anonymous maps are read over netlink, a few small replies
	// whatever the table's size (`nft list chain` caches much of the
	// table to print one chain, and starts a process), and searched for
	// the endpoint's address and port.
	svcChain := NFTServiceChain(name)
	w, err := OpenNFTWatch()
	if err != nil {
		return nil, "", err
	}
	want := EndpointBytes(ChangeEndpoint())
	return &changeProbe{version: w, present: func(ctx context.Context) (bool, string, error) {
		raw, ok, err := w.ChainDump(NFTTable, svcChain)
		switch {
		case err != nil:
			return false, "", err
		case !ok:
			return false, "no rules in chain " + svcChain, nil
		}
		return bytes.Contains(raw, want), fmt.Sprintf("chain %s: %d bytes of rules and maps without %s", svcChain, len(raw), ChangeEndpoint()), nil
	}, confirm: func(ctx context.Context) error {
		out, err := NFTListChain(ctx, svcChain)
		if err != nil {
			return err
		}
		if text := fmt.Sprintf("%s . %d", ChangeEndpoint().Addr(), ChangeEndpoint().Port()); !strings.Contains(out, text) {
			return fmt.Errorf("netlink showed %s in chain %s, but nft lists no %q in it:\n%s", ChangeEndpoint(), svcChain, text, out)
		}
		return nil
	}}, fmt.Sprintf("chain %s to send to %s", svcChain, ChangeEndpoint()), nil
}

// measureChange adds ChangeEndpoint to the middle service and times it
// until the change is in the kernel (see newChangeProbe): it watches the
// table's version and checks the change whenever the version moves. The
// time is when the version that holds the change was first seen.
func (l *RowLab) measureChange(ctx context.Context, proc *lab.Process, m *Measured) error {
	before, err := l.waitQuiet(ctx, proc)
	if err != nil {
		return err
	}
	i := ChangedService(l.Spec.Services)
	name := PortNameOf(ServiceName(i))

	sliceAPI := l.Client.DiscoveryV1().EndpointSlices(Namespace)
	changed := NewSlice(ServiceName(i), append(BulkEndpoints(i), ChangeEndpoint().Addr()))
	current, err := sliceAPI.Get(ctx, changed.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading endpoint slice %s: %w", changed.Name, err)
	}
	changed.ResourceVersion = current.ResourceVersion
	probe, waitingFor, err := l.newChangeProbe(name)
	if err != nil {
		return err
	}
	defer probe.version.Close()
	seen, err := probe.version.Read()
	if err != nil {
		return err
	}

	t0 := time.Now()
	if _, err := sliceAPI.Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("adding endpoint %s to slice %s: %w", ChangeEndpoint(), changed.Name, err)
	}
	deadline := t0.Add(l.Settings.KproxyBudget + l.Settings.KubeProxyBudget)
	var lastSeen string
	for {
		v, err := probe.version.Read()
		if err != nil {
			return err
		}
		if v != seen {
			at := time.Now()
			seen = v
			m.Commits++
			ok, saw, err := probe.present(ctx)
			if ok {
				m.Change = at.Sub(t0)
				if probe.confirm != nil {
					began := time.Now()
					if err := probe.confirm(ctx); err != nil {
						return err
					}
					l.Logf("the change is confirmed by nft list chain, which took %v", time.Since(began))
				}
				break
			}
			lastSeen = fmt.Sprintf("%s (%v)", saw, err)
			// A probe that cannot see what the proxy wrote would wait
			// for the whole budget: after a while, ask the slow way too,
			// and stop if that sees the change.
			if probe.confirm != nil && time.Since(t0) > probeDoubt {
				if probe.confirm(ctx) == nil {
					return fmt.Errorf("nft lists %s, but the netlink probe does not see it: a benchmark defect (last seen: %s)", waitingFor, lastSeen)
				}
			}
		}
		if err := alive(proc); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited in vain for %s after %d table commits; last seen: %s", waitingFor, m.Commits, lastSeen)
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
