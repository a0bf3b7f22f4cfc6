package handles_test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/ipvs"
	"github.com/vishvananda/netlink"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/fakeipvs"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/ipfamily"
)

func fakeSets() implementation[setsEnv] {
	return implementation[setsEnv]{
		name: "fake",
		fresh: func(*testing.T) setsEnv {
			s := &fakeipvs.IPSets{}
			return setsEnv{sets: s, reference: func(spec desired.SetSpec) error {
				s.SetReferenced(spec.Name, true)
				return nil
			}}
		},
		read: readSets,
	}
}

// kernelSets is the real IPSets in this network namespace. Each case
// starts with none of the contract's sets and no iptables rule using them.
func kernelSets() implementation[setsEnv] {
	referenced := false
	return implementation[setsEnv]{
		name: "kernel",
		fresh: func(t *testing.T) setsEnv {
			if referenced {
				for _, fam := range []ipfamily.Family{ipfamily.IPv4, ipfamily.IPv6} {
					if out, err := exec.Command(iptablesCommand(fam), "-w", "-F", "INPUT").CombinedOutput(); err != nil {
						t.Fatalf("flushing %s INPUT: %v: %s", fam, err, out)
					}
				}
				referenced = false
			}
			sets := handles.NetlinkIPSets{}
			for _, spec := range contractSetSpecs() {
				if err := sets.Destroy(spec.Name); err != nil && !handles.IsNotFound(err) {
					t.Fatalf("destroying %s: %v", spec.Name, err)
				}
			}
			return setsEnv{sets: sets, reference: func(spec desired.SetSpec) error {
				referenced = true
				return referenceSet(spec)
			}}
		},
		read: readSets,
	}
}

// referenceSet adds an iptables rule that matches spec's set in every
// dimension, as the mode's rules do.
func referenceSet(spec desired.SetSpec) error {
	flags := map[string]string{
		desired.BitmapPort: "dst", desired.HashIP: "dst", desired.HashIPPort: "dst,dst",
		desired.HashIPPortIP: "dst,dst,src", desired.HashIPPortNet: "dst,dst,src",
	}[spec.Type]
	cmd := exec.Command(iptablesCommand(spec.Family), "-w", "-A", "INPUT", "-m", "set", "--match-set", spec.Name, flags, "-j", "ACCEPT")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// iptablesCommand is fam's iptables; the guest kernel has only the legacy
// backend.
func iptablesCommand(fam ipfamily.Family) string {
	name := "iptables"
	if fam == ipfamily.IPv6 {
		name = "ip6tables"
	}
	if guest.InGuest() {
		name += "-legacy"
	}
	return name
}

func fakeLink() implementation[linkEnv] {
	return implementation[linkEnv]{
		name: "fake",
		fresh: func(*testing.T) linkEnv {
			l := &fakeipvs.Link{}
			return linkEnv{v4: l.Family(false), v6: l.Family(true), create: l.EnsureLink,
				removeBehind: l.DeleteLink, createBehind: l.EnsureLink}
		},
		read: readLink,
	}
}

// kernelLink is the real kube-ipvs0 in this network namespace. Where the
// kernel has no dummy links, a veth named kube-ipvs0 stands in, so the
// address cases still run; the cases only EnsureLink can set up do not.
func kernelLink(t *testing.T) implementation[linkEnv] {
	dummy := dummyLinksWork(t)
	// The handles live across cases, as in the mode, each case deleting
	// the link behind their backs first.
	v4, v6 := handles.NewLink(false), handles.NewLink(true)
	createBehind := func() error {
		return netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: handles.DummyLink}})
	}
	create := v4.EnsureLink
	if !dummy {
		createBehind = func() error {
			standIn := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: handles.DummyLink}, PeerName: "kp-ipvs-peer"}
			return netlink.LinkAdd(standIn)
		}
		create = createBehind
	}
	removeBehind := func() error {
		link, err := netlink.LinkByName(handles.DummyLink)
		if err != nil {
			return err
		}
		return netlink.LinkDel(link)
	}
	return implementation[linkEnv]{
		name: "kernel",
		fresh: func(t *testing.T) linkEnv {
			if _, err := netlink.LinkByName(handles.DummyLink); err == nil {
				if err := removeBehind(); err != nil {
					t.Fatalf("deleting %s: %v", handles.DummyLink, err)
				}
			}
			return linkEnv{v4: v4, v6: v6, create: create, removeBehind: removeBehind, createBehind: createBehind}
		},
		read: readLink,
		lacks: func(feature string) string {
			if feature == needsDummy && !dummy {
				return "this kernel has no dummy links"
			}
			return ""
		},
	}
}

// dummyLinksWork reports whether this kernel makes dummy links.
func dummyLinksWork(t *testing.T) bool {
	probe := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "kp-probe0"}}
	err := netlink.LinkAdd(probe)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		return false
	}
	if err != nil {
		t.Fatalf("probing for dummy links: %v", err)
	}
	if err := netlink.LinkDel(probe); err != nil {
		t.Fatalf("deleting the probe link: %v", err)
	}
	return true
}

func fakeIPVS() implementation[handles.IPVS] {
	return implementation[handles.IPVS]{
		name:  "fake",
		fresh: func(*testing.T) handles.IPVS { return &fakeipvs.IPVS{} },
		read:  readIPVS,
	}
}

// kernelIPVS is the real IPVS table of this network namespace, flushed
// before each case.
func kernelIPVS(t *testing.T) implementation[handles.IPVS] {
	h, err := ipvs.New("")
	if err != nil {
		t.Fatalf("opening the IPVS handle: %v", err)
	}
	t.Cleanup(h.Close)
	return implementation[handles.IPVS]{
		name: "kernel",
		fresh: func(t *testing.T) handles.IPVS {
			if err := h.Flush(); err != nil {
				t.Fatalf("flushing IPVS: %v", err)
			}
			return h
		},
		read: readIPVS,
	}
}
