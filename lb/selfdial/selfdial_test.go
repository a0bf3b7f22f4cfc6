package selfdial

import (
	"net/netip"
	"testing"
	"time"
)

func TestReturning(t *testing.T) {
	local := netip.MustParseAddrPort("198.19.0.1:40000")
	endpoint := netip.MustParseAddrPort("198.18.0.10:80")
	other := netip.MustParseAddrPort("198.18.0.11:80")
	d := New()
	d.Add(local, Dial{From: "default/web:http", Endpoint: endpoint})
	for _, tc := range []struct {
		name      string
		peer, dst netip.AddrPort
		want      bool
	}{
		{"the dial itself", local, endpoint, true},
		{"the dial seen through an IPv4-mapped socket", netip.MustParseAddrPort("[::ffff:198.19.0.1]:40000"), netip.MustParseAddrPort("[::ffff:198.18.0.10]:80"), true},
		// The kernel gives one local port to connections to different
		// destinations: a client on the node with the dial's source is
		// not the dial.
		{"the same source to another destination", local, other, false},
		{"another source port", netip.MustParseAddrPort("198.19.0.1:40001"), endpoint, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dial, got := d.Returning(tc.peer, tc.dst)
			if got != tc.want {
				t.Fatalf("Returning(%s, %s) = %v, want %v", tc.peer, tc.dst, got, tc.want)
			}
			if got && dial.From != "default/web:http" {
				t.Errorf("dial from %q, want default/web:http", dial.From)
			}
		})
	}
	d.Remove(local, endpoint)
	if _, got := d.Returning(local, endpoint); got || d.Len() != 0 {
		t.Errorf("after Remove: returning %v, %d dials; want neither", got, d.Len())
	}
}

func TestNilDialsFindNothing(t *testing.T) {
	var d *Dials
	ap := netip.MustParseAddrPort("198.19.0.1:40000")
	d.Add(ap, Dial{Endpoint: ap})
	d.Remove(ap, ap)
	if _, got := d.Returning(ap, ap); got || d.Len() != 0 || d.FirstLoop("x", time.Now()) {
		t.Error("a nil Dials found something")
	}
}

func TestFirstLoopOncePerServicePort(t *testing.T) {
	d := New()
	now := time.Now()
	got := []bool{d.FirstLoop("a", now), d.FirstLoop("a", now.Add(time.Second)), d.FirstLoop("b", now),
		d.FirstLoop("a", now.Add(relogAfter+time.Second))}
	want := []bool{true, false, true, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("FirstLoop answers %v, want %v", got, want)
		}
	}
}
