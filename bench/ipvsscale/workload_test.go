package ipvsscale

import (
	"net/netip"
	"testing"
	"time"

	"kproxy.dev/kproxy/sync/servicemap"
)

func TestWorkloadValidate(t *testing.T) {
	cases := []struct {
		w  Workload
		ok bool
	}{
		{Workload{Ports: 1, Endpoints: 1}, true},
		{Workload{Ports: MaxPorts, Endpoints: EndpointsPerPort}, true},
		{Workload{Ports: 0, Endpoints: 10}, false},
		{Workload{Ports: MaxPorts + 1, Endpoints: 10}, false},
		{Workload{Ports: 10, Endpoints: 0}, false},
	}
	for _, tc := range cases {
		if err := tc.w.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v, want ok=%t", tc.w, err, tc.ok)
		}
	}
	if _, err := (Workload{Ports: 1, Endpoints: 1}).Snapshot(3); err == nil {
		t.Error("Snapshot(3) succeeded, want an error: there are variants 0 to 2")
	}
}

// TestAddressPlan: VIPs are distinct and in 198.18.0.0/16, endpoints are
// distinct per port and in 198.19.0.0/16 outside the node's /24, and the
// change endpoints collide with none of them.
func TestAddressPlan(t *testing.T) {
	w := Workload{Ports: MaxPorts, Endpoints: 3}
	snap, err := w.Snapshot(0)
	if err != nil {
		t.Fatal(err)
	}
	vips := netip.MustParsePrefix("198.18.0.0/16")
	eps := netip.MustParsePrefix("198.19.0.0/16")
	node := netip.MustParsePrefix("198.19.0.0/24")
	seenVIP := map[netip.Addr]bool{}
	if snap.Len() != MaxPorts {
		t.Fatalf("snapshot holds %d ports, want %d", snap.Len(), MaxPorts)
	}
	for _, sp := range snap.All() {
		vip := sp.ClusterIPs[0]
		if !vips.Contains(vip) || seenVIP[vip] || vip.As4()[3] == 0 || vip.As4()[3] == 255 {
			t.Fatalf("%s: cluster IP %s is outside 198.18/16, a network or broadcast-looking address, or repeated", sp.Name, vip)
		}
		seenVIP[vip] = true
		seenEP := map[netip.AddrPort]bool{}
		for _, e := range sp.Endpoints {
			ap := netip.AddrPortFrom(e.Addr, e.Port)
			if !eps.Contains(e.Addr) || node.Contains(e.Addr) || seenEP[ap] {
				t.Fatalf("%s: endpoint %s is outside 198.19/16, in the node's /24, or repeated", sp.Name, ap)
			}
			for v := 1; v <= 2; v++ {
				if ap == ChangedEndpoint(v) {
					t.Fatalf("%s: endpoint %s is a change endpoint", sp.Name, ap)
				}
			}
			seenEP[ap] = true
		}
	}
	if len(seenVIP) != MaxPorts {
		t.Errorf("%d distinct cluster IPs, want %d", len(seenVIP), MaxPorts)
	}
}

// TestVariantsDifferInOneEndpoint: variants 1 and 2 each replace port 0's
// last endpoint, and nothing else.
func TestVariantsDifferInOneEndpoint(t *testing.T) {
	w := Workload{Ports: 30, Endpoints: 4}
	snaps := make([]*servicemap.Snapshot, 3)
	for v := range snaps {
		var err error
		if snaps[v], err = w.Snapshot(v); err != nil {
			t.Fatal(err)
		}
	}
	for v := 1; v <= 2; v++ {
		diffs := 0
		for name, base := range snaps[0].All() {
			changed, ok := snaps[v].Get(name)
			if !ok || len(changed.Endpoints) != len(base.Endpoints) {
				t.Fatalf("variant %d: %s is missing or has another endpoint count", v, name)
			}
			for j, b := range base.Endpoints {
				c := changed.Endpoints[j]
				if b.Addr == c.Addr && b.Port == c.Port {
					continue
				}
				diffs++
				if base.ClusterIPs[0] != ChangedKey().Addr || j != len(base.Endpoints)-1 || netip.AddrPortFrom(c.Addr, c.Port) != ChangedEndpoint(v) {
					t.Errorf("variant %d: %s endpoint %d is %s:%d, want only %s's last endpoint changed to %s",
						v, name, j, c.Addr, c.Port, ChangedKey(), ChangedEndpoint(v))
				}
			}
		}
		if diffs != 1 {
			t.Errorf("variant %d differs from the base in %d endpoints, want 1", v, diffs)
		}
	}
}

func TestMeasureBuild(t *testing.T) {
	if _, err := MeasureBuild(Workload{Ports: 10, Endpoints: 2}, 0); err == nil {
		t.Error("MeasureBuild with 0 runs succeeded, want an error")
	}
	if _, err := MeasureBuild(Workload{Ports: 0, Endpoints: 2}, 1); err == nil {
		t.Error("MeasureBuild of an empty workload succeeded, want an error")
	}
	d, err := MeasureBuild(Workload{Ports: 10, Endpoints: 2}, 3)
	if err != nil || d <= 0 || d > time.Minute {
		t.Errorf("MeasureBuild = %v, %v; want a positive duration", d, err)
	}
}
