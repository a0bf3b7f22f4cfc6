package nfacct

import (
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

func TestNameBounds(t *testing.T) {
	for _, name := range []string{"", strings.Repeat("x", NameMax)} {
		if err := (Netlink{}).Ensure(name); err == nil || !strings.Contains(err.Error(), "want 1 to 31 bytes") {
			t.Errorf("Ensure(%q) = %v, want the name refused before asking the kernel", name, err)
		}
	}
}

// TestOnKernel creates an object twice, counts packets in it with an
// iptables rule as kube-proxy's does, and reads the count back.
func TestOnKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables not installed")
	}
	lab.Run(t, "ip", "link", "set", "lo", "up")
	c := Netlink{}
	for range 2 {
		if err := c.Ensure(CTStateInvalidDropped); errors.Is(err, ErrUnsupported) {
			t.Skip(err)
		} else if err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	lab.Run(t, "iptables", "-A", "OUTPUT", "-o", "lo", "-p", "udp", "--dport", "9", "-m", "nfacct", "--nfacct-name", CTStateInvalidDropped, "-j", "ACCEPT")
	// While a rule uses it, Ensure still succeeds and keeps the count.
	// Unconnected, so the port unreachable each datagram earns is not
	// reported on the next write.
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 3 {
		if _, err := conn.WriteTo([]byte("count me"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Ensure(CTStateInvalidDropped); err != nil {
		t.Fatalf("Ensure while a rule uses the object: %v", err)
	}
	got, err := c.Get(CTStateInvalidDropped)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != CTStateInvalidDropped || got.Packets != 3 || got.Bytes == 0 {
		t.Errorf("Get = %+v, want 3 packets counted under %s", got, CTStateInvalidDropped)
	}
	if _, err := c.Get(LocalhostNodePortAccept); err == nil {
		t.Errorf("Get of an object never created succeeded")
	}
}
