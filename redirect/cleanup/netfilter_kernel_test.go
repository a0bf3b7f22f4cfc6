package cleanup

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
)

// nftScript fills a namespace with tables as the nft tool writes them:
// kube-proxy's (with chains, a map, a set and rules, as its nftables mode
// leaves them) and others that must survive.
const nftScript = `
table ip kube-proxy {
	set cluster-ips {
		type ipv4_addr
		elements = { 198.18.0.10 }
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
	}
	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
}
table ip6 kube-proxy {
	chain filter-input {
		type filter hook input priority -110; policy accept;
	}
}
table inet kube-proxy {
}
table ip user {
	chain c {
	}
}
`

func sortedTables(ts []NFTable) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.String())
	}
	slices.Sort(out)
	return out
}

// TestNFTablesContract runs the same cases against the kernel (netlink) and
// the fake cleanup's unit tests use, so the fake fails as the kernel does.
func TestNFTablesContract(t *testing.T) {
	impls := map[string]func(t *testing.T) NFTables{
		"kernel": func(t *testing.T) NFTables {
			lab.Run(t, "nft", "-f", writeTemp(t, nftScript))
			return netlinkNFTables{}
		},
		"fake": func(*testing.T) NFTables {
			return &fakeNFTables{tables: []NFTable{{"ip", "kube-proxy"}, {"ip6", "kube-proxy"}, {"inet", "kube-proxy"}, {"ip", "user"}}}
		},
	}
	for name, open := range impls {
		t.Run(name, func(t *testing.T) {
			if name == "kernel" && lab.InFreshNetns(t) {
				return
			}
			n := open(t)
			tables, err := n.Tables()
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"inet kube-proxy", "ip kube-proxy", "ip user", "ip6 kube-proxy"}
			if got := sortedTables(tables); !slices.Equal(got, want) {
				t.Fatalf("tables %v, want %v", got, want)
			}
			// A table with chains, sets, maps and rules goes whole.
			if err := n.DeleteTable(NFTable{"ip", "kube-proxy"}); err != nil {
				t.Fatal(err)
			}
			if err := n.DeleteTable(NFTable{"ip6", "kube-proxy"}); err != nil {
				t.Fatal(err)
			}
			tables, err = n.Tables()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := sortedTables(tables), []string{"inet kube-proxy", "ip user"}; !slices.Equal(got, want) {
				t.Fatalf("after deleting kube-proxy's tables: %v, want %v", got, want)
			}
			err = n.DeleteTable(NFTable{"ip", "kube-proxy"})
			if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "table ip kube-proxy") {
				t.Fatalf("deleting a missing table: %v, want ENOENT naming the table", err)
			}
		})
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ruleset.nft")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCleanupWithoutTheNFTAndIPSetTools: a node without the nft and ipset
// programs (most have no nft) still loses kube-proxy's nftables tables and
// ipvs mode's sets to cleanup, which speaks netfilter netlink itself.
func TestCleanupWithoutTheNFTAndIPSetTools(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	// The test itself needs the tools, to set the node up and to look.
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Fatal(err)
	}
	ipset, err := exec.LookPath("ipset")
	if err != nil {
		t.Fatal(err)
	}
	lab.Run(t, nft, "-f", writeTemp(t, nftScript))
	lab.Run(t, ipset, "create", "KUBE-CLUSTER-IP", "hash:ip,port")
	lab.Run(t, ipset, "create", "user-allow", "hash:net")
	t.Setenv("PATH", lab.PathWithout(t, "nft", "ipset"))
	for _, hidden := range []string{"nft", "ipset"} {
		if _, err := exec.LookPath(hidden); err == nil {
			t.Fatalf("%s is still on PATH", hidden)
		}
	}
	ctx := context.Background()
	if err := Clean(ctx, kernel.Detect(ctx, false), keeping("")); err != nil {
		t.Fatalf("cleanup without nft and ipset: %v", err)
	}
	got := strings.TrimSpace(lab.Run(t, nft, "list", "tables"))
	if want := "table inet kube-proxy\ntable ip user"; got != want {
		t.Errorf("tables after cleanup:\n%s\nwant:\n%s", got, want)
	}
	if got := strings.TrimSpace(lab.Run(t, ipset, "list", "-n")); got != "user-allow" {
		t.Errorf("ipsets after cleanup: %q, want user-allow only", got)
	}
}

// TestIPSetsContract runs the same cases against the kernel (netlink) and
// the fake: listing, destroying, a set a rule uses (busy), a missing set.
func TestIPSetsContract(t *testing.T) {
	impls := map[string]func(t *testing.T) IPSets{
		"kernel": func(t *testing.T) IPSets {
			lab.Run(t, "ipset", "create", "KUBE-CLUSTER-IP", "hash:ip,port")
			lab.Run(t, "ipset", "create", "user-allow", "hash:net")
			lab.Run(t, "iptables-nft", "-A", "INPUT", "-m", "set", "--match-set", "user-allow", "src", "-j", "ACCEPT")
			return netlinkIPSets{}
		},
		"fake": func(*testing.T) IPSets {
			return &fakeIPSets{sets: []string{"KUBE-CLUSTER-IP", "user-allow"}, busy: map[string]bool{"user-allow": true}}
		},
	}
	for name, open := range impls {
		t.Run(name, func(t *testing.T) {
			if name == "kernel" && lab.InFreshNetns(t) {
				return
			}
			s := open(t)
			names, err := s.Names()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(names)
			if want := []string{"KUBE-CLUSTER-IP", "user-allow"}; !slices.Equal(names, want) {
				t.Fatalf("sets %v, want %v", names, want)
			}
			if err := s.Destroy("KUBE-CLUSTER-IP"); err != nil {
				t.Fatal(err)
			}
			var ipsetErr nl.IPSetError
			if err := s.Destroy("user-allow"); !errors.As(err, &ipsetErr) || ipsetErr != nl.IPSET_ERR_BUSY || !strings.Contains(err.Error(), "in use") {
				t.Fatalf("destroying a set a rule matches: %v, want IPSET_ERR_BUSY saying it is in use", err)
			}
			if err := s.Destroy("KUBE-CLUSTER-IP"); err != nil {
				t.Fatalf("destroying a missing set: %v, want no error", err)
			}
			names, err = s.Names()
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"user-allow"}; !slices.Equal(names, want) {
				t.Fatalf("sets after destroying: %v, want %v", names, want)
			}
		})
	}
}
