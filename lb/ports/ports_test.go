package ports

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Range
		wantErr bool
	}{
		{in: "", want: Range{}},
		{in: "0-0", want: Range{}},
		{in: "30000-30009", want: Range{30000, 30009}},
		{in: " 30000 - 30000 ", want: Range{30000, 30000}},
		{in: "30000+10", want: Range{30000, 30009}},
		{in: "8080", want: Range{8080, 8080}},
		{in: "30009-30000", wantErr: true},
		{in: "0-100", wantErr: true},
		{in: "1-70000", wantErr: true},
		{in: "65535+2", wantErr: true},
		{in: "a-b", wantErr: true},
		{in: "100+0", wantErr: true},
		{in: "0", wantErr: true},
	} {
		got, err := ParseRange(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseRange(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestKernelChosen(t *testing.T) {
	a := NewAllocator(Range{})
	l, err := a.ListenTCP(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if port := l.Addr().(*net.TCPAddr).Port; port == 0 {
		t.Error("kernel-chosen listener has port 0")
	}
	a.ReleaseAddr(l.Addr()) // a no-op, must not panic
}

// TestAllocateInRange runs in its own namespace so no other process holds
// ports of the range.
func TestAllocateInRange(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	lo := netip.MustParseAddr("127.0.0.1")
	a := NewAllocator(Range{Lo: 40000, Hi: 40002})

	// Someone else holds 40001: the allocator must skip it.
	squatter, err := net.Listen("tcp4", "127.0.0.1:40001")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()

	var got []int
	var listeners []*net.TCPListener
	for range 2 {
		l, err := a.ListenTCP(lo)
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, l)
		got = append(got, l.Addr().(*net.TCPAddr).Port)
	}
	if got[0] != 40000 || got[1] != 40002 {
		t.Errorf("ports = %v, want [40000 40002]", got)
	}
	if _, err := a.ListenTCP(lo); !errors.Is(err, ErrRangeExhausted) {
		t.Fatalf("third TCP allocation: %v; want ErrRangeExhausted", err)
	}

	// UDP is a separate port space.
	u, err := a.ListenUDP(lo)
	if err != nil {
		t.Fatalf("UDP allocation with TCP exhausted: %v", err)
	}
	if port := u.LocalAddr().(*net.UDPAddr).Port; port != 40000 {
		t.Errorf("UDP port = %d, want 40000", port)
	}
	u.Close()

	// Released ports come back.
	listeners[0].Close()
	a.ReleaseAddr(listeners[0].Addr())
	l, err := a.ListenTCP(lo)
	if err != nil {
		t.Fatalf("allocation after release: %v", err)
	}
	defer l.Close()
	if port := l.Addr().(*net.TCPAddr).Port; port != 40000 {
		t.Errorf("port after release = %d, want 40000", port)
	}
	listeners[1].Close()
}

func TestClaimReturnsNonConflictErrors(t *testing.T) {
	a := NewAllocator(Range{Lo: 40000, Hi: 40009})
	boom := errors.New("permission denied")
	calls := 0
	_, err := a.Claim(TCP, false, func(uint16) error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Errorf("Claim = %v after %d binds; want the bind error after 1", err, calls)
	}
}
