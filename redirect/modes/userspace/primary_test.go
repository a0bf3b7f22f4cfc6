package userspace

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/nodeaddr"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestNodePortAddressesPrimary: with --nodeport-addresses=primary the
// NodePort portals lead from the Node object's primary IP only (not from
// the node's other address), and move when the Node's address changes,
// without a Service change.
func TestNodePortAddressesPrimary(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	v4, v6 := &recordingApplier{}, &recordingApplier{}
	m, err := New(context.Background(), Config{
		Features: features(), NodeName: "node-a", Opener: &fakeOpener{held: map[string]bool{}},
		NodePorts: nodeaddr.Policy{Primary: true},
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.9")}, nil
		},
		Applier: func(f ipfamily.Family) (Applier, error) {
			if f == ipfamily.IPv6 {
				return v6, nil
			}
			return v4, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	tr := servicemap.NewTracker("node-a", nil)
	tr.OnServiceUpdate(service("web", "198.18.0.10", v1.ProtocolTCP, 30080))
	tr.OnEndpointSliceUpdate(slice("web", v1.ProtocolTCP, "198.19.1.11"))
	tr.OnSynced()
	for _, st := range []struct {
		name      string
		nodeIP    string
		want, not string
	}{
		{"the Node's primary IP", "198.19.0.1", "-d 198.19.0.1/32", "198.19.0.9"},
		{"the Node's address changes", "198.19.0.9", "-d 198.19.0.9/32", "198.19.0.1/32"},
	} {
		t.Run(st.name, func(t *testing.T) {
			tr.OnNodeUpdate(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
				Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: st.nodeIP}}}})
			snap, changes := tr.Snapshot()
			if err := m.Sync(context.Background(), snap, changes); err != nil {
				t.Fatal(err)
			}
			var nodePortRules []string
			for _, r := range strings.Split(v4.rules(), "\n") {
				if strings.Contains(r, "--dport 30080") {
					nodePortRules = append(nodePortRules, r)
				}
			}
			if len(nodePortRules) == 0 {
				t.Fatalf("no NodePort portal:\n%s", v4.rules())
			}
			for _, r := range nodePortRules {
				if !strings.Contains(r, st.want) || strings.Contains(r, st.not) {
					t.Errorf("NodePort portal %q: want it limited to %s", r, st.want)
				}
			}
		})
	}
}
