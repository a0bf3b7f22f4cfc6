package tcprelay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/tcprelay"
)

// fixedPicker always offers the same endpoints, in order.
type fixedPicker []netip.AddrPort

func (p fixedPicker) Pick(netip.Addr) []netip.AddrPort   { return p }
func (fixedPicker) Connected(netip.Addr, netip.AddrPort) {}
func (fixedPicker) Failed(netip.Addr, netip.AddrPort)    {}

// A Proxy serves one listener. Only connections a portal rule redirected to
// it are relayed: one made straight to the proxy port (here, on loopback
// with no portal rule) is reset and counted, so the proxy is no open relay.
// The relayed path needs a REDIRECT rule; the package's tests set one up in
// a network namespace of their own.
func Example() {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	metrics, _ := lbmetrics.New(nil) // unregistered
	proxy, err := tcprelay.New(tcprelay.Config{
		Listener: ln,
		Picker:   fixedPicker{netip.MustParseAddrPort("127.0.0.1:8080")},
		Metrics:  metrics,
		Name:     "default/web:http",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error)
	go func() { served <- proxy.Serve(ctx) }()

	// The reset may arrive before the dial returns, or on the first read.
	c, err := net.Dial("tcp4", proxy.Addr().String())
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	fmt.Println("reset:", errors.Is(err, syscall.ECONNRESET))
	fmt.Println("rejected as direct:", testutil.ToFloat64(metrics.For(lbmetrics.ProtocolTCP).RejectedDirect))

	cancel() // as Close: stops accepting; established connections go on
	fmt.Println("Serve:", <-served)
	// Output:
	// reset: true
	// rejected as direct: 1
	// Serve: <nil>
}
