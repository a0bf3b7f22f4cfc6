package servicehealth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/servicemap"
)

func loopback(*servicemap.NodeInfo) []netip.Addr {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
}

// freePort asks the kernel for a loopback port that is free right now.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func port(name, portName string, hc uint16, eps ...servicemap.Endpoint) *servicemap.ServicePort {
	return &servicemap.ServicePort{
		Name:                servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, Port: portName, Protocol: v1.ProtocolTCP},
		HealthCheckNodePort: hc,
		ExternalPolicyLocal: hc != 0,
		Endpoints:           eps,
	}
}

func ep(addr string, local, ready bool) servicemap.Endpoint {
	return servicemap.Endpoint{Addr: netip.MustParseAddr(addr), Port: 80, IsLocal: local, Ready: ready, Serving: ready}
}

// probe does what a cloud load balancer does.
func probe(t *testing.T, p uint16) (int, response) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", p))
	if err != nil {
		t.Fatalf("probing health-check port %d: %v", p, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	var body response
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("decoding the body: %v", err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	// kube-proxy v1.36's body, byte for byte, and its weight header.
	want := fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}",
		body.Service.Namespace, body.Service.Name, body.LocalEndpoints, body.ServiceProxyHealthy)
	if string(raw) != want {
		t.Errorf("body\n%s\nwant kube-proxy's\n%s", raw, want)
	}
	if w := resp.Header.Get("X-Load-Balancing-Endpoint-Weight"); w != strconv.Itoa(body.LocalEndpoints) {
		t.Errorf("X-Load-Balancing-Endpoint-Weight = %q, want %d", w, body.LocalEndpoints)
	}
	return resp.StatusCode, body
}

func TestServesLocalEndpointHealth(t *testing.T) {
	hc := freePort(t)
	var healthy atomic.Bool
	healthy.Store(true)
	s := New(Config{Addresses: loopback, ProxyHealthy: healthy.Load})
	t.Cleanup(func() { s.Close() })

	steps := []struct {
		name      string
		ports     []*servicemap.ServicePort
		unhealthy bool
		wantCode  int
		wantEps   int
	}{
		{
			name: "two ready local endpoints, counted once across the service's ports",
			ports: []*servicemap.ServicePort{
				port("lb", "http", hc, ep("198.19.1.11", true, true), ep("198.19.1.12", true, true), ep("198.19.2.11", false, true)),
				port("lb", "https", hc, ep("198.19.1.11", true, true)),
			},
			wantCode: 200, wantEps: 2,
		},
		{
			name:     "only a not-ready local endpoint",
			ports:    []*servicemap.ServicePort{port("lb", "http", hc, ep("198.19.1.11", true, false), ep("198.19.2.11", false, true))},
			wantCode: 503, wantEps: 0,
		},
		{
			name:      "local endpoints but the proxy is unhealthy",
			ports:     []*servicemap.ServicePort{port("lb", "http", hc, ep("198.19.1.11", true, true))},
			unhealthy: true,
			wantCode:  503, wantEps: 1,
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			healthy.Store(!st.unhealthy)
			if err := s.Sync(servicemap.NewSnapshot(1, nil, st.ports...)); err != nil {
				t.Fatal(err)
			}
			code, body := probe(t, hc)
			if code != st.wantCode || body.LocalEndpoints != st.wantEps || body.ServiceProxyHealthy == st.unhealthy {
				t.Errorf("got %d %+v, want %d with %d local endpoints, proxy healthy %v", code, body, st.wantCode, st.wantEps, !st.unhealthy)
			}
			if body.Service.Namespace != "ns" || body.Service.Name != "lb" {
				t.Errorf("service = %+v", body.Service)
			}
		})
	}

	// The service goes away: its port closes.
	if err := s.Sync(servicemap.NewSnapshot(2, nil, port("other", "", 0, ep("198.19.1.11", true, true)))); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", hc)); err == nil {
		t.Errorf("health-check port %d still answers after its service went away", hc)
	}
	if got := s.Ports(); len(got) != 0 {
		t.Errorf("Ports() = %v, want none", got)
	}
}

func TestAPortThatCannotBeOpenedDoesNotStopTheOthers(t *testing.T) {
	good, bad := freePort(t), freePort(t)
	var failed []string
	s := New(Config{
		Addresses: loopback,
		OpenFailed: func(svc types.NamespacedName, port uint16, err error) {
			failed = append(failed, fmt.Sprintf("%s %d %v", svc, port, err))
		},
		Listen: func(network, addr string) (net.Listener, error) {
			if addr == fmt.Sprintf("127.0.0.1:%d", bad) {
				return nil, errors.New("address already in use")
			}
			return net.Listen(network, addr)
		},
	})
	t.Cleanup(func() { s.Close() })
	err := s.Sync(servicemap.NewSnapshot(1, nil,
		port("a", "", good, ep("198.19.1.11", true, true)),
		port("b", "", bad, ep("198.19.1.12", true, true))))
	if err == nil {
		t.Fatal("Sync reported no error for the port that could not be opened")
	}
	want := fmt.Sprintf("health-check node port %d of service ns/b on 127.0.0.1:%d: address already in use", bad, bad)
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if code, _ := probe(t, good); code != 200 {
		t.Errorf("the good port answered %d", code)
	}
	if want := []string{fmt.Sprintf("ns/b %d address already in use", bad)}; !slices.Equal(failed, want) {
		t.Errorf("OpenFailed heard %q, want %q", failed, want)
	}
}

// TestListenersFollowTheNodeAddresses: with "primary", the addresses come
// from the Node object, which may arrive after the first Sync or change;
// the listeners move with them.
func TestListenersFollowTheNodeAddresses(t *testing.T) {
	hc := freePort(t)
	s := New(Config{Addresses: func(node *servicemap.NodeInfo) []netip.Addr {
		if node == nil {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		return node.Addresses
	}})
	t.Cleanup(func() { s.Close() })
	answers := func(addr string) bool {
		resp, err := http.Get(fmt.Sprintf("http://%s:%d/", addr, hc))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}
	lb := port("lb", "http", hc, ep("198.19.1.11", true, true))
	for _, st := range []struct {
		name      string
		node      *servicemap.NodeInfo
		answer    string
		notAnswer string
	}{
		{"no Node yet", nil, "127.0.0.1", "127.0.0.2"},
		{"the Node arrives", &servicemap.NodeInfo{Name: "n", Addresses: []netip.Addr{netip.MustParseAddr("127.0.0.2")}}, "127.0.0.2", "127.0.0.1"},
		{"its address changes", &servicemap.NodeInfo{Name: "n", Addresses: []netip.Addr{netip.MustParseAddr("127.0.0.3")}}, "127.0.0.3", "127.0.0.2"},
	} {
		t.Run(st.name, func(t *testing.T) {
			if err := s.Sync(servicemap.NewSnapshot(1, st.node, lb)); err != nil {
				t.Fatal(err)
			}
			if !answers(st.answer) {
				t.Errorf("health-check node port %d does not answer on %s", hc, st.answer)
			}
			if answers(st.notAnswer) {
				t.Errorf("health-check node port %d still answers on %s", hc, st.notAnswer)
			}
		})
	}
}

// TestListenNetworks: an address given listens in its own family only, so
// the IPv6 wildcard (every IPv6 address) leaves the IPv4 port to the IPv4
// listeners; no address given means one listener for both.
func TestListenNetworks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs []netip.Addr
		want  []string
	}{
		{"every address", nil, []string{"tcp :7"}},
		{"the primary IPv4 address, every IPv6 one", []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.IPv6Unspecified()},
			[]string{"tcp4 198.19.0.1:7", "tcp6 [::]:7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			s := New(Config{
				Addresses: func(*servicemap.NodeInfo) []netip.Addr { return tc.addrs },
				Listen: func(network, addr string) (net.Listener, error) {
					got = append(got, network+" "+addr)
					return newIdleListener(), nil
				},
			})
			t.Cleanup(func() { s.Close() })
			if err := s.Sync(servicemap.NewSnapshot(1, nil, port("lb", "", 7, ep("198.19.1.11", true, true)))); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("listened on %q, want %q", got, tc.want)
			}
		})
	}
}

// idleListener accepts nothing until closed.
type idleListener struct{ closed chan struct{} }

func newIdleListener() *idleListener { return &idleListener{closed: make(chan struct{})} }

func (l *idleListener) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}

func (l *idleListener) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *idleListener) Addr() net.Addr { return &net.TCPAddr{} }
