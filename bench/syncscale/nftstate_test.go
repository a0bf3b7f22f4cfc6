package syncscale

import (
	"bytes"
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestNFTServiceChain checks the chain names against kube-proxy v1.36's
// own (its nftables proxier tests name these chains).
func TestNFTServiceChain(t *testing.T) {
	tests := []struct {
		ns, name, port string
		want           string
	}{
		{"ns1", "svc1", "p80", "service-ULMVA6XW-ns1/svc1/tcp/p80"},
		{"ns2", "svc2", "p80", "service-42NFTM6N-ns2/svc2/tcp/p80"},
	}
	for _, tt := range tests {
		name := servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: tt.ns, Name: tt.name}, Port: tt.port, Protocol: "TCP"}
		if got := NFTServiceChain(name); got != tt.want {
			t.Errorf("NFTServiceChain(%v) = %q, want %q", name, got, tt.want)
		}
	}
}

func TestParseNFTTable(t *testing.T) {
	text := "table ip kube-proxy {\n" +
		"\tcomment \"rules for kube-proxy\"\n" +
		"\tset cluster-ips {\n\t\ttype ipv4_addr\n\t\tcomment \"Active ClusterIPs\"\n\t\telements = { 198.18.1.0, 198.18.1.1 }\n\t}\n\n" +
		"\tmap service-ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\telements = { 198.18.1.0 . tcp . 80 : goto service-AAAAAAAA-default/svc-00000/tcp/http,\n\t\t\t     198.18.1.1 . tcp . 80 : goto service-BBBBBBBB-default/svc-00001/tcp/http }\n\t}\n\n" +
		"\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}\n\n" +
		"\tchain services {\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t\tfib daddr type local ip daddr != 127.0.0.0/8 jump nodeports comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"\n\t}\n\n" +
		"\tchain service-AAAAAAAA-default/svc-00000/tcp/http {\n\t\tip daddr 198.18.1.0 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade\n" +
		"\t\tmeta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 198.19.2.1 . 8080,\n\t\t\t1 : 198.19.2.2 . 8080 }\n\t}\n\n" +
		"\tchain service-BBBBBBBB-default/svc-00001/tcp/http {\n\t\tcomment \"a chain comment\"\n\t}\n}\n"
	got := ParseNFTTable(text)
	want := NFTStats{Rules: 5, Chains: 4, ServiceChains: 2, Bytes: len(text)}
	if got != want {
		t.Errorf("ParseNFTTable = %+v, want %+v", got, want)
	}
}

func TestAnonymousSets(t *testing.T) {
	raw := []byte("\x00x__map12\x00yy__set3\x00__map12\x00__map101kff1e2570\x00__map-x\x00__\x00__set\x00__map7")
	got := anonymousSets(raw)
	if strings.Join(got, ",") != "__map12,__set3,__map101kff1e2570" {
		t.Errorf("anonymousSets = %q, want __map12, __set3 and __map101kff1e2570 once each (and no unterminated, bare or odd names)", got)
	}
}

// TestNFTChainDump checks the nftables rows' change probe on a table of
// kube-proxy's shape: the endpoint is found in the chain's anonymous
// numgen map, never in another chain, and the generation
// moves with every commit.
func TestNFTChainDump(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	nft := func(script string) {
		t.Helper()
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft -f: %v\n%s\n%s", err, out, script)
		}
	}
	w, err := OpenNFTWatch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	gen := func() string {
		t.Helper()
		v, err := w.Read()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ep := netip.MustParseAddrPort("198.19.255.1:8080")
	const chain = "service-AAAAAAAA-default/svc-00000/tcp/http"
	if _, ok, err := w.ChainDump(NFTTable, chain); err != nil || ok {
		t.Fatalf("ChainDump without the table = %v, %v; want not found", ok, err)
	}
	g0 := gen()
	nft("add table ip kube-proxy\nadd chain ip kube-proxy " + chain + "\n" +
		"add rule ip kube-proxy " + chain + " meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 198.19.2.1 . 8080, 1 : 198.19.2.2 . 8080 }\n" +
		"add chain ip kube-proxy other\nadd rule ip kube-proxy other meta l4proto tcp dnat to 198.19.255.1:8080\n")
	g1 := gen()
	if g1 == g0 {
		t.Errorf("the generation stayed at %s after a commit", g0)
	}
	raw, ok, err := w.ChainDump(NFTTable, chain)
	if err != nil || !ok {
		t.Fatalf("ChainDump = %v, %v", ok, err)
	}
	if !bytes.Contains(raw, EndpointBytes(netip.MustParseAddrPort("198.19.2.2:8080"))) {
		t.Errorf("ChainDump does not show the map's endpoint 198.19.2.2:8080")
	}
	if bytes.Contains(raw, EndpointBytes(ep)) {
		t.Errorf("ChainDump shows %s, which only another chain holds", ep)
	}
	nft("flush chain ip kube-proxy " + chain + "\n" +
		"add rule ip kube-proxy " + chain + " meta l4proto tcp dnat ip addr . port to numgen random mod 3 map { 0 : 198.19.2.1 . 8080, 1 : 198.19.2.2 . 8080, 2 : 198.19.255.1 . 8080 }\n")
	if gen() == g1 {
		t.Errorf("the generation stayed at %s after a commit", g1)
	}
	if raw, _, err := w.ChainDump(NFTTable, chain); err != nil || !bytes.Contains(raw, EndpointBytes(ep)) {
		t.Errorf("ChainDump after the map gained %s: found %v, %v", ep, bytes.Contains(raw, EndpointBytes(ep)), err)
	}
	if out, err := NFTListChain(context.Background(), chain); err != nil || !strings.Contains(out, "198.19.255.1 . 8080") {
		t.Errorf("NFTListChain = %q, %v", out, err)
	}
	tables, err := NFTTables(context.Background())
	if err != nil || !hasKubeProxyTable(tables) {
		t.Errorf("NFTTables = %q, %v; want the kube-proxy table", tables, err)
	}
}
