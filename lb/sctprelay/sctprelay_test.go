package sctprelay

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/sync/servicemap"
)

func TestSockaddrConversion(t *testing.T) {
	for _, tc := range []struct {
		in         string
		wantFamily int
		wantSA     unix.Sockaddr
		wantBack   string
	}{
		{"198.19.0.5:36412", unix.AF_INET, &unix.SockaddrInet4{Port: 36412, Addr: [4]byte{198, 19, 0, 5}}, "198.19.0.5:36412"},
		{"[::ffff:198.19.0.5]:9", unix.AF_INET, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{198, 19, 0, 5}}, "198.19.0.5:9"},
		{"[fd00::7]:2905", unix.AF_INET6, &unix.SockaddrInet6{Port: 2905, Addr: netip.MustParseAddr("fd00::7").As16()}, "[fd00::7]:2905"},
		{"0.0.0.0:0", unix.AF_INET, &unix.SockaddrInet4{}, "0.0.0.0:0"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			family, sa, err := sockaddr(netip.MustParseAddrPort(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if family != tc.wantFamily {
				t.Errorf("family = %d, want %d", family, tc.wantFamily)
			}
			if diff := cmp.Diff(tc.wantSA, sa, cmpopts.IgnoreUnexported(unix.SockaddrInet4{}, unix.SockaddrInet6{})); diff != "" {
				t.Errorf("sockaddr (-want +got):\n%s", diff)
			}
			back, err := addrPort(sa)
			if err != nil || back.String() != tc.wantBack {
				t.Errorf("back = %v, %v; want %s", back, err, tc.wantBack)
			}
		})
	}
	for _, bad := range []netip.AddrPort{{}, netip.MustParseAddrPort("[fe80::1%eth0]:9")} {
		if _, _, err := sockaddr(bad); err == nil {
			t.Errorf("sockaddr(%v) accepted it", bad)
		}
	}
	if _, err := addrPort(&unix.SockaddrUnix{Name: "/x"}); err == nil {
		t.Error("addrPort accepted a unix socket address")
	}
}

func TestProtocolAbsentErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{unix.EPROTONOSUPPORT, true},
		{unix.ESOCKTNOSUPPORT, true},
		{unix.EAFNOSUPPORT, true},
		{unix.EMFILE, false},
		{unix.EPERM, false},
	} {
		if got := protocolAbsent(tc.err); got != tc.want {
			t.Errorf("protocolAbsent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestSupportedMatchesKernel(t *testing.T) {
	ok, err := Supported()
	if err != nil {
		t.Fatalf("Supported: %v", err)
	}
	fd, serr := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP)
	if serr == nil {
		unix.Close(fd)
	}
	if ok != (serr == nil) {
		t.Errorf("Supported() = %v but socket(IPPROTO_SCTP) gave %v", ok, serr)
	}
	if !ok {
		if _, err := Listen(netip.MustParseAddrPort("127.0.0.1:0")); err == nil {
			t.Error("Listen succeeded on a kernel Supported says has no SCTP")
		}
	}
}

func spn(ns, name, port string) servicemap.ServicePortName {
	return servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: v1.ProtocolSCTP}
}

func TestUnservedReporter(t *testing.T) {
	m := lbmetrics.Discard()
	u := NewUnservedReporter(m.SCTPUnservedServicePorts)
	a, b, c := spn("default", "diameter", "s6a"), spn("default", "diameter", "gx"), spn("ran", "ngap", "")
	steps := []struct {
		ports     []servicemap.ServicePortName
		wantNew   []servicemap.ServicePortName
		wantGauge float64
	}{
		{[]servicemap.ServicePortName{a, b}, []servicemap.ServicePortName{b, a}, 2},
		{[]servicemap.ServicePortName{b, a, a}, nil, 2},
		{[]servicemap.ServicePortName{a, c}, []servicemap.ServicePortName{c}, 2},
		{nil, nil, 0},
		{[]servicemap.ServicePortName{a}, []servicemap.ServicePortName{a}, 1},
	}
	for i, s := range steps {
		got := u.Update(s.ports)
		if diff := cmp.Diff(s.wantNew, got); diff != "" {
			t.Errorf("step %d: newly unserved (-want +got):\n%s", i, diff)
		}
		if g := testutil.ToFloat64(m.SCTPUnservedServicePorts); g != s.wantGauge {
			t.Errorf("step %d: gauge = %v, want %v", i, g, s.wantGauge)
		}
	}
}

// tcpPair returns the two ends of a loopback TCP connection: Pipe's copy
// loop is protocol-independent, so TCP stands in for SCTP here.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialed.Close(); accepted.Close() })
	return dialed, accepted
}

// TestPipeEndsBothWaysOnCleanClose checks the SCTP close semantics Pipe
// keeps (over TCP streams on the host): the side that ends first has
// everything it sent delivered, then the other side sees the end too.
func TestPipeEndsBothWaysOnCleanClose(t *testing.T) {
	for _, clientFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("clientFirst=%v", clientFirst), func(t *testing.T) {
			client, relayClientSide := tcpPair(t)
			relayEndpointSide, endpoint := tcpPair(t)
			type result struct{ toEndpoint, toClient int64 }
			done := make(chan result, 1)
			go func() {
				te, tc := Pipe(relayClientSide, relayEndpointSide)
				done <- result{te, tc}
			}()

			data := make([]byte, 300_000)
			_, _ = rand.Read(data)
			from, to := client, endpoint
			if !clientFirst {
				from, to = endpoint, client
			}
			go func() {
				_, _ = from.Write(data)
				_ = from.Close()
			}()
			got, err := io.ReadAll(to)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the other side got %d bytes (%v), want the %d bytes sent before the close, then the end", len(got), err, len(data))
			}
			select {
			case r := <-done:
				want := result{toEndpoint: int64(len(data))}
				if !clientFirst {
					want = result{toClient: int64(len(data))}
				}
				if r != want {
					t.Errorf("Pipe counted %+v, want %+v", r, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Pipe did not return after one side closed")
			}
		})
	}
}

func TestPipeEndsWhenEndpointDies(t *testing.T) {
	client, relayClientSide := tcpPair(t)
	relayEndpointSide, endpoint := tcpPair(t)
	done := make(chan struct{})
	go func() { Pipe(relayClientSide, relayEndpointSide); close(done) }()

	endpoint.SetLinger(0)
	endpoint.Close() // a reset: the client must not be left hanging
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(client); err != nil && isTimeout(err) {
		t.Fatal("client still open after the endpoint reset")
	}
	<-done
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

type recordingPicker struct {
	mu                sync.Mutex
	endpoints         []netip.AddrPort
	connected, failed []netip.AddrPort
}

func (p *recordingPicker) Pick(netip.Addr) []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]netip.AddrPort(nil), p.endpoints...)
}
func (p *recordingPicker) Connected(_ netip.Addr, ep netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connected = append(p.connected, ep)
}
func (p *recordingPicker) Failed(_ netip.Addr, ep netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = append(p.failed, ep)
}

// TestRelayOverKernelSCTP needs a kernel with SCTP sockets; it runs in the
// guest kernel of the IPVS issue and skips here.
func TestRelayOverKernelSCTP(t *testing.T) {
	ok, err := Supported()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip("this kernel has no SCTP sockets (socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) is not supported); " +
			"the SCTP relay is exercised in the guest kernel of the IPVS issue")
	}
	loopback := netip.MustParseAddrPort("127.0.0.1:0")
	backend, err := Listen(loopback)
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() { // echo server
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	// A closed port first: the relay must fail over to the live endpoint.
	deadLn, err := Listen(loopback)
	if err != nil {
		t.Fatal(err)
	}
	dead := deadLn.Addr()
	deadLn.Close()

	proxyLn, err := Listen(loopback)
	if err != nil {
		t.Fatal(err)
	}
	picker := &recordingPicker{endpoints: []netip.AddrPort{dead, backend.Addr()}}
	m, _ := lbmetrics.New(prometheus.NewRegistry())
	r, err := New(Config{Listener: proxyLn, Picker: picker, Metrics: m, Name: "test/sctp"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Serve(ctx) }()
	defer r.Close()

	c, err := Dial(r.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := []byte("sctp through the relay")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo = %q, %v", got, err)
	}
	picker.mu.Lock()
	defer picker.mu.Unlock()
	if len(picker.failed) != 1 || picker.failed[0] != dead || len(picker.connected) != 1 {
		t.Errorf("failed = %v, connected = %v; want one failure on %v then one connection", picker.failed, picker.connected, dead)
	}
}
