package guest_test

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// TestGuestSCTPCannotDialFromAClientAddress shows why the userspace relays
// dial SCTP endpoints from the node's address while they keep a TCP or UDP
// client's own: the same transparent dial from a client's address, with its
// replies routed back to the node as kproxy routes them (a policy rule to a
// table whose only route is local), connects over TCP, but SCTP binds the
// address only with IP_FREEBIND and its association never comes up (the
// kernel sends the INIT from the node's own address, and the answer matches
// no association). Should a kernel change that, this fails and says so.
func TestGuestSCTPCannotDialFromAClientAddress(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	const (
		client   = "198.19.200.1"
		endpoint = "198.19.1.2"
		port     = 9000
	)
	for _, args := range [][]string{
		{"netns", "add", "sctp-ep"},
		{"link", "add", "veth-sctp", "type", "veth", "peer", "name", "veth-sctp-ep"},
		{"link", "set", "veth-sctp-ep", "netns", "sctp-ep"},
		{"addr", "add", "198.19.1.1/24", "dev", "veth-sctp"},
		{"link", "set", "veth-sctp", "up"},
		{"-n", "sctp-ep", "addr", "add", endpoint + "/24", "dev", "veth-sctp-ep"},
		{"-n", "sctp-ep", "link", "set", "veth-sctp-ep", "up"},
		{"-n", "sctp-ep", "route", "add", "default", "via", "198.19.1.1"},
		{"route", "add", "local", "default", "dev", "lo", "table", "207"},
		{"rule", "add", "to", client, "lookup", "207", "priority", "207"},
	} {
		lab.Run(t, "ip", args...)
	}
	t.Cleanup(func() {
		for _, args := range [][]string{{"rule", "del", "priority", "207"}, {"route", "flush", "table", "207"},
			{"link", "del", "veth-sctp"}, {"netns", "del", "sctp-ep"}} {
			_ = exec.Command("ip", args...).Run()
		}
	})
	to := &unix.SockaddrInet4{Addr: [4]byte{198, 19, 1, 2}, Port: port}
	from := &unix.SockaddrInet4{Addr: [4]byte{198, 19, 200, 1}}
	for _, tc := range []struct {
		name      string
		proto     int
		options   []int
		wantBind  error
		wantAssoc bool
	}{
		{"TCP, transparent", unix.IPPROTO_TCP, []int{unix.IP_TRANSPARENT}, nil, true},
		{"SCTP, transparent", unix.IPPROTO_SCTP, []int{unix.IP_TRANSPARENT}, unix.EADDRNOTAVAIL, false},
		{"SCTP, transparent and free-binding", unix.IPPROTO_SCTP, []int{unix.IP_TRANSPARENT, unix.IP_FREEBIND}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := listenIn(t, "sctp-ep", tc.proto, to)
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, tc.proto)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			for _, o := range tc.options {
				if err := unix.SetsockoptInt(fd, unix.SOL_IP, o, 1); err != nil {
					t.Fatalf("setting option %d: %v", o, err)
				}
			}
			if err := unix.Bind(fd, from); !errors.Is(err, tc.wantBind) || (err == nil) != (tc.wantBind == nil) {
				t.Fatalf("binding %s: %v, want %v", client, err, tc.wantBind)
			}
			if tc.wantBind != nil {
				return
			}
			if err := unix.Connect(fd, to); err != nil && !errors.Is(err, unix.EINPROGRESS) {
				t.Fatalf("connecting: %v", err)
			}
			// A refusal comes at once; an association that would come up
			// does within the wait, which only bounds a failing case.
			wait := 3 * time.Second
			if tc.wantAssoc {
				wait = time.Minute
			}
			_ = unix.SetNonblock(ln, false)
			tv := unix.NsecToTimeval(wait.Nanoseconds())
			if err := unix.SetsockoptTimeval(ln, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				t.Fatal(err)
			}
			a, peer, err := unix.Accept(ln)
			if err == nil {
				defer unix.Close(a)
			}
			switch {
			case tc.wantAssoc && err != nil:
				t.Fatalf("the endpoint accepted nothing from %s: %v", client, err)
			case tc.wantAssoc:
				if p, ok := peer.(*unix.SockaddrInet4); !ok || p.Addr != from.Addr {
					t.Errorf("the endpoint saw %+v, want %s", peer, client)
				}
			case err == nil:
				t.Errorf("the endpoint accepted an association from %+v: this kernel lets SCTP dial from a client's address, so the relays could keep it", peer)
			}
		})
	}
}

// listenIn opens a listening socket of proto on addr inside network
// namespace ns.
func listenIn(t *testing.T, ns string, proto int, addr unix.Sockaddr) int {
	t.Helper()
	type result struct {
		fd  int
		err error
	}
	done := make(chan result)
	go func() {
		// The thread enters ns and is thrown away with it.
		runtime.LockOSThread()
		fd, err := func() (int, error) {
			h, err := os.Open("/run/netns/" + ns)
			if err != nil {
				return -1, err
			}
			defer h.Close()
			if err := unix.Setns(int(h.Fd()), unix.CLONE_NEWNET); err != nil {
				return -1, err
			}
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, proto)
			if err != nil {
				return -1, err
			}
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			if err := unix.Bind(fd, addr); err != nil {
				unix.Close(fd)
				return -1, err
			}
			if err := unix.Listen(fd, 4); err != nil {
				unix.Close(fd)
				return -1, err
			}
			return fd, nil
		}()
		done <- result{fd, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("listening in %s: %v", ns, r.err)
	}
	t.Cleanup(func() { unix.Close(r.fd) })
	return r.fd
}
