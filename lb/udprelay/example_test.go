package udprelay_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"kproxy.dev/kproxy/lb/udprelay"
)

// fixedPicker always offers the same endpoints, in order.
type fixedPicker []netip.AddrPort

func (p fixedPicker) Pick(netip.Addr) []netip.AddrPort   { return p }
func (fixedPicker) Connected(netip.Addr, netip.AddrPort) {}
func (fixedPicker) Failed(netip.Addr, netip.AddrPort)    {}

// A Relay forwards each client's datagrams to the endpoint its picker chose
// and sends the endpoint's replies back from the proxy socket. Here the
// endpoint is an echo server on loopback.
func Example() {
	echo, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := echo.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = echo.WriteToUDPAddrPort(append([]byte("echo: "), buf[:n]...), from)
		}
	}()

	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		fmt.Println(err)
		return
	}
	relay, err := udprelay.New(udprelay.Config{
		Conn:   conn, // the relay owns it from here on
		Picker: fixedPicker{echo.LocalAddr().(*net.UDPAddr).AddrPort()},
		Name:   "kube-system/dns:dns",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer relay.Close()
	go func() { _ = relay.Serve(context.Background()) }()

	client, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(relay.Addr()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	if _, err := client.Write([]byte("hello")); err != nil {
		fmt.Println(err)
		return
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := client.Read(buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s\n", buf[:n])
	fmt.Println("flows:", relay.FlowCount())
	// Output:
	// echo: hello
	// flows: 1
}
