// Command tcprelayspec serves the data-plane benchmark's TCP relay specs
// ("tcp,listen,upstream", bench/dataplane.RelaySpec) with lb/tcprelay alone,
// as kproxy's userspace mode runs it behind a REDIRECT portal: the
// open-relay check, the check for connections that come back from the
// relay itself, one endpoint, the default loops. Built from two trees,
// it compares relay variants in one run of the benchmark:
//
//	go build -o /tmp/relay-new ./bench/dataplane/tcprelayspec
//	KPROXY_DATAPLANE_EXTRA=old=/tmp/relay-old,new=/tmp/relay-new make bench-dataplane
package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"kproxy.dev/kproxy/bench/dataplane"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/lb/selfdial"
	"kproxy.dev/kproxy/lb/tcprelay"
)

// onePicker offers its one endpoint to every client.
type onePicker netip.AddrPort

func (p onePicker) Pick(netip.Addr) []netip.AddrPort   { return []netip.AddrPort{netip.AddrPort(p)} }
func (onePicker) Connected(netip.Addr, netip.AddrPort) {}
func (onePicker) Failed(netip.Addr, netip.AddrPort)    {}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "tcprelayspec: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	metrics, err := lbmetrics.New(nil)
	if err != nil {
		return err
	}
	dials := selfdial.New()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, len(args))
	for _, a := range args {
		spec, err := dataplane.ParseRelaySpec(a)
		if err != nil {
			return err
		}
		if spec.Network != "tcp" {
			return fmt.Errorf("%s: only tcp specs are served", a)
		}
		var lc net.ListenConfig
		lc.SetMultipathTCP(false) // as lb/ports listens
		ln, err := lc.Listen(ctx, "tcp4", spec.Listen.String())
		if err != nil {
			return err
		}
		p, err := tcprelay.New(tcprelay.Config{Listener: ln, Picker: onePicker(spec.Upstream), Metrics: metrics, Name: a, Dials: dials})
		if err != nil {
			return err
		}
		go func() { served <- p.Serve(ctx) }()
	}
	// The first relay to stop (an error, or the signal) stops the rest.
	err = <-served
	cancel()
	for range len(args) - 1 {
		<-served
	}
	return err
}
