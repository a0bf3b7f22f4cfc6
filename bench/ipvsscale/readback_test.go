package ipvsscale

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/moby/ipvs"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// droppingIPVS accepts some writes without doing them, like a kernel that
// silently ignored the request.
type droppingIPVS struct {
	handles.IPVS
	dropDestinations bool
}

func (d droppingIPVS) NewDestination(s *ipvs.Service, dst *ipvs.Destination) error {
	if d.dropDestinations {
		return nil
	}
	return d.IPVS.NewDestination(s, dst)
}

// droppingLink accepts address adds without doing them.
type droppingLink struct{ handles.Link }

func (droppingLink) AddAddr(netip.Addr) error { return nil }

// TestInventoryCatchesSilentNoOps: a sync whose writes were accepted but
// not done passes Sync, so only the read-back can tell; it must name what
// is missing.
func TestInventoryCatchesSilentNoOps(t *testing.T) {
	w := Workload{Ports: 5, Endpoints: 2}
	cases := []struct {
		name     string
		handles  func(fakes) Handles
		wantDiff []string
	}{
		{"everything applied", func(f fakes) Handles { return f.handles() }, nil},
		{"real servers dropped", func(f fakes) Handles {
			h := f.handles()
			h.IPVS = droppingIPVS{IPVS: f.ipvs, dropDestinations: true}
			return h
		}, []string{"real servers: the kernel holds 0, want 10"}},
		{"addresses dropped", func(f fakes) Handles {
			h := f.handles()
			h.Link = droppingLink{Link: f.link}
			return h
		}, []string{"addresses on kube-ipvs0: the kernel holds 0, want 5"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			states := mustStates(t, w)
			rig := rigOver(t, tc.handles(newFakes()))
			mustSync(t, rig, states.Base, true)
			got, err := ReadInventory(rig.Kernel, states.Base)
			if err != nil {
				t.Fatal(err)
			}
			diff := got.Diff(Expected(states.Base))
			if len(tc.wantDiff) == 0 {
				if diff != nil {
					t.Fatalf("Diff = %v, want none", diff)
				}
				return
			}
			if diff == nil {
				t.Fatalf("Diff found nothing, want %q", tc.wantDiff)
			}
			for _, want := range tc.wantDiff {
				if !strings.Contains(diff.Error(), want) {
					t.Errorf("Diff = %v, want it to say %q", diff, want)
				}
			}
		})
	}
}

func TestExpectedCountsTheDesiredState(t *testing.T) {
	states := mustStates(t, Workload{Ports: 7, Endpoints: 3})
	inv := Expected(states.Base)
	if inv.VirtualServers != 7 || inv.RealServers != 21 || inv.Addresses != 7 {
		t.Errorf("Expected = %+v, want 7 virtual servers, 21 real servers, 7 addresses", inv)
	}
	// Every cluster IP:port is in KUBE-CLUSTER-IP and every VIP in KUBE-IPVS-IPS.
	for _, set := range []string{desired.SetClusterIP, desired.SetIPVSAddrs} {
		if n := inv.SetMembers[set]; n != 7 {
			t.Errorf("Expected: %s has %d members, want 7", set, n)
		}
	}
}

// TestCheckServiceComparesRealServers: it passes on what was applied and
// names the difference after a real server's weight changed behind the
// reconciler's back.
func TestCheckServiceComparesRealServers(t *testing.T) {
	f := newFakes()
	rig := rigOver(t, f.handles())
	states := mustStates(t, Workload{Ports: 3, Endpoints: 2})
	mustSync(t, rig, states.Base, true)
	svc, err := ServiceOf(states.Base, ChangedKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckService(rig.Kernel, svc); err != nil {
		t.Fatalf("CheckService after applying: %v", err)
	}
	rs := svc.RealServers[0]
	rs.Weight = 0
	if err := f.ipvs.UpdateDestination(handles.ToService(svc.VirtualServer), handles.ToDestination(rs)); err != nil {
		t.Fatal(err)
	}
	err = CheckService(rig.Kernel, svc)
	if err == nil || !strings.Contains(err.Error(), svc.Key.String()) {
		t.Errorf("CheckService after a weight changed = %v, want an error naming %s", err, svc.Key)
	}
	changed, err := ServiceOf(states.Changed[0], ChangedKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckService(rig.Kernel, changed); err == nil {
		t.Error("CheckService of the changed variant before syncing it passed, want a difference")
	}
}

func TestServiceOfMissingKey(t *testing.T) {
	states := mustStates(t, Workload{Ports: 2, Endpoints: 1})
	k := desired.Key{Addr: VIP(5), Protocol: "TCP", Port: 80}
	if _, err := ServiceOf(states.Base, k); err == nil || !strings.Contains(err.Error(), k.String()) {
		t.Errorf("ServiceOf(%s) = %v, want an error naming it", k, err)
	}
}
