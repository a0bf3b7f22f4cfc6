package ipvswalk

import (
	"net/netip"
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/trace"
)

func TestWalkFollowsWeights(t *testing.T) {
	cfg := configV4()
	st := build(t, cfg, svc("web", "198.18.0.10:80", eps("198.19.1.11:8080", "198.19.1.12:8080", "198.19.1.13:8080")))
	// Weights as a drain leaves them: one real server takes nothing new,
	// one takes twice its share.
	st.Services[0].RealServers[0].Weight = 0
	st.Services[0].RealServers[2].Weight = 2
	res, err := Walk(st, cfg.LocalAddrs, packet("198.19.1.20", "198.18.0.10:80", fromPod))
	if err != nil {
		t.Fatal(err)
	}
	checkLandings(t, res, trace.Accepted, []landing{
		accepted("198.19.1.12:8080", 1.0/3, false), accepted("198.19.1.13:8080", 2.0/3, false)})
	if w := res.Landings[1].RealServer.Weight; w != 2 {
		t.Errorf("the landing reports weight %d, want 2:\n%s", w, res)
	}
}

func TestResultReads(t *testing.T) {
	cfg := configV4()
	st := build(t, cfg,
		svc("web", "198.18.0.10:80", sticky, eps("198.19.1.11:8080", "198.19.1.12:8080")),
		svc("empty", "198.18.0.30:80"))
	w, err := New(st, cfg.LocalAddrs)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		pkt   trace.Packet
		parts []string
	}{
		{name: "to real servers", pkt: packet("198.19.0.2", "198.18.0.10:80"), parts: []string{
			"tcp 198.19.0.2 -> 198.18.0.10:80 (forwarded): accepted\n",
			"  p=0.5000 accepted: TCP 198.18.0.10:80 rr persistent 10800 (default/web:p/TCP) -> 198.19.1.11:8080 weight 1, masqueraded\n",
			"      ipvs: tcp 198.18.0.10:80 rr -> 198.19.1.12:8080 weight 1\n",
			"      nat: -A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE\n",
		}},
		{name: "refused", pkt: packet("198.19.0.2", "198.18.0.30:80"), parts: []string{
			"  p=1.0000 rejected at 198.18.0.30:80 by ipvs: tcp 198.18.0.30:80 rr has no real server",
		}},
		{name: "no virtual server", pkt: packet("198.19.0.2", "198.18.0.99:80"), parts: []string{
			"  p=1.0000 accepted: routed on to 198.18.0.99:80, no virtual server\n",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := w.Walk(tc.pkt)
			if err != nil {
				t.Fatal(err)
			}
			s := res.String()
			for _, part := range tc.parts {
				if !strings.Contains(s, part) {
					t.Errorf("String() lacks %q:\n%s", part, s)
				}
			}
		})
	}
	res, err := w.Walk(packet("198.19.1.20", "198.18.0.10:80", fromPod))
	if err != nil {
		t.Fatal(err)
	}
	got := res.RealServers()
	want := map[netip.AddrPort]float64{netip.MustParseAddrPort("198.19.1.11:8080"): 0.5, netip.MustParseAddrPort("198.19.1.12:8080"): 0.5}
	if len(got) != len(want) || got[netip.MustParseAddrPort("198.19.1.11:8080")] != 0.5 || got[netip.MustParseAddrPort("198.19.1.12:8080")] != 0.5 {
		t.Errorf("RealServers() = %v, want %v", got, want)
	}
}

func TestWalkErrors(t *testing.T) {
	cfg := configV4()
	good := func() *trace.Packet { p := packet("198.19.0.2", "198.18.0.10:80"); return &p }
	cases := []struct {
		name        string
		spoil       func(*testing.T) (*Walker, error)
		pkt         *trace.Packet
		wantErrPart string
	}{
		{name: "no state", spoil: func(*testing.T) (*Walker, error) { return New(nil, nil) }, wantErrPart: "walk: no state"},
		{name: "a layer the tool refuses", spoil: func(t *testing.T) (*Walker, error) {
			st := build(t, cfg, svc("web", "198.18.0.10:80"))
			st.Tables[0].Chains[0].Rules = append(st.Tables[0].Chains[0].Rules, "-j KUBE-NOWHERE")
			return New(st, cfg.LocalAddrs)
		}, wantErrPart: "restoring the iptables layer"},
		{name: "a packet of the other family", spoil: func(t *testing.T) (*Walker, error) {
			return New(build(t, cfg, svc("web", "198.18.0.10:80")), cfg.LocalAddrs)
		}, pkt: func() *trace.Packet { p := packet("fd00:19::2", "[fd00:18::10]:80"); return &p }(), wantErrPart: "not of the dump's family"},
		{name: "a packet without an entry", spoil: func(t *testing.T) (*Walker, error) {
			return New(build(t, cfg, svc("web", "198.18.0.10:80")), cfg.LocalAddrs)
		}, pkt: func() *trace.Packet { p := good(); p.Entry = 0; return p }(), wantErrPart: "needs an Entry"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := tc.spoil(t)
			if err == nil && tc.pkt != nil {
				_, err = w.Walk(*tc.pkt)
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErrPart) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErrPart)
			}
		})
	}
}
