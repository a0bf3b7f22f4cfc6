package userspace

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/lb/ports"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/sysctl"
)

// localPortalListenConfig binds local portal sockets with IP_FREEBIND: an
// IPv6 socket cannot otherwise bind an address that only a local route (no
// interface address) makes local, and a socket opened in the same sync as
// its route need not wait for it.
//
// Plain TCP, not Go's default MPTCP listeners, whose sockets refuse the
// drop-all filter (setDropAll).
func localPortalListenConfig() *net.ListenConfig {
	lc := &net.ListenConfig{Control: func(network, _ string, c syscall.RawConn) error {
		var sockErr error
		err := c.Control(func(fd uintptr) {
			level, opt := unix.SOL_IP, unix.IP_FREEBIND
			if network == "tcp6" || network == "udp6" {
				level, opt = unix.SOL_IPV6, unix.IPV6_FREEBIND
			}
			sockErr = unix.SetsockoptInt(int(fd), level, opt, 1)
		})
		if err != nil {
			return err
		}
		return sockErr
	}}
	lc.SetMultipathTCP(false)
	return lc
}

// setDropAll attaches (drop) or detaches a socket filter that discards
// every packet the socket would receive: a listener dropping SYNs makes
// clients retry as kube-proxy's DROP for a Local traffic policy without
// local endpoints does, while the socket keeps its port.
func setDropAll(raw syscall.RawConn, drop bool) error {
	if drop {
		return attachFilter(raw, []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}})
	}
	var sockErr error
	err := raw.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0)
		if sockErr == unix.ENOENT {
			sockErr = nil // no filter was attached
		}
	})
	if err != nil {
		return err
	}
	return sockErr
}

// setDropUnless attaches (drop) or detaches a socket filter like
// setDropAll's that lets through what comes from the allowed sources of
// fam, and, with fromItself, a packet whose source is its destination: a
// local portal's listener of an external Local-policy class without local
// endpoints drops outside clients and serves the node's own, which its
// relay short-circuits to every endpoint. An internal class's drops the
// node too, as kube-proxy does.
func setDropUnless(raw syscall.RawConn, drop bool, fam ipfamily.Family, allowed []netip.Prefix, fromItself bool) error {
	if !drop {
		return setDropAll(raw, false)
	}
	prog, err := dropUnlessFilter(fam, allowed, fromItself)
	if err != nil {
		return err
	}
	return attachFilter(raw, prog)
}

// attachFilter attaches the classic BPF socket filter prog, replacing any.
func attachFilter(raw syscall.RawConn, prog []unix.SockFilter) error {
	var sockErr error
	err := raw.Control(func(fd uintptr) {
		fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
		sockErr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog)
	})
	if err != nil {
		return err
	}
	return sockErr
}

// dropUnlessFilter is a classic BPF socket filter that keeps a packet whose
// IP source is in one of allowed (those of fam), or, with fromItself, is its
// destination, and drops any other. The node's connection to a service
// address a local portal makes local has that address as its source (a
// local route's). From outside, such a packet is an IPv4 martian the kernel
// drops, or an IPv6 one whose replies stay on the node, like one forging a
// node address. The addresses are read from the network header
// (SKF_NET_OFF), one 32-bit word at a time, the source's masked by the
// prefix.
func dropUnlessFilter(fam ipfamily.Family, allowed []netip.Prefix, fromItself bool) ([]unix.SockFilter, error) {
	// SKF_NET_OFF: negative offsets read relative to the network header.
	srcOff, dstOff, words := int32(-0x100000+12), int32(-0x100000+16), 1
	if fam == ipfamily.IPv6 {
		srcOff, dstOff, words = -0x100000+8, -0x100000+24, 4
	}
	var prog []unix.SockFilter
	if fromItself {
		// Source and destination compared word by word; a word that
		// differs skips to the prefixes.
		for w := range words {
			prog = append(prog,
				unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: uint32(dstOff + int32(4*w))},
				unix.SockFilter{Code: unix.BPF_MISC | unix.BPF_TAX},
				unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: uint32(srcOff + int32(4*w))},
				unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_X, Jf: uint8(4*(words-w) - 3)})
		}
		prog = append(prog, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff})
	}
	for _, p := range ipfamily.Prefixes(allowed, fam) {
		addr := p.Masked().Addr().AsSlice()
		var block []unix.SockFilter
		for w := 0; w*32 < p.Bits(); w++ {
			bits := min(p.Bits()-w*32, 32)
			mask := uint32(0xffffffff) << (32 - bits)
			word := uint32(addr[4*w])<<24 | uint32(addr[4*w+1])<<16 | uint32(addr[4*w+2])<<8 | uint32(addr[4*w+3])
			block = append(block,
				unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: uint32(srcOff + int32(4*w))},
				unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: mask},
				unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: word})
		}
		block = append(block, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff})
		// A word that differs skips to the next prefix's block.
		for i := range block {
			if block[i].Code == unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K {
				block[i].Jf = uint8(len(block) - i - 1)
			}
		}
		prog = append(prog, block...)
	}
	prog = append(prog, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: 0})
	if len(prog) > 4096 { // BPF_MAXINSNS
		return nil, fmt.Errorf("a socket filter for %d allowed source prefixes is too long", len(allowed))
	}
	return prog, nil
}

// awaitGuard makes a new proxy socket drop what it receives and discards
// what it queued between bind and now: nothing a client sends it before
// its guard rule exists may reach an endpoint. armGuardedRelays detaches
// the filter once the rules are in.
func awaitGuard(raw syscall.RawConn) error {
	if err := setDropAll(raw, true); err != nil {
		return fmt.Errorf("holding the proxy socket until its guard rule is in: %w", err)
	}
	var sockErr error
	err := raw.Control(func(fd uintptr) {
		buf := make([]byte, 1)
		for {
			_, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
			if err == unix.EAGAIN || err == unix.EWOULDBLOCK {
				return
			}
			if err != nil && err != unix.EINTR {
				sockErr = err
				return
			}
		}
	})
	if err == nil {
		err = sockErr
	}
	if err != nil {
		return fmt.Errorf("discarding datagrams queued before the guard rule: %w", err)
	}
	return nil
}

// warnUnprivilegedProxyPorts says, where the rules cannot check the
// receiving socket (markRelaySocket, why says which), when REDIRECT
// portals' proxy ports can be bound by unprivileged users: a clean stop
// withdraws the portals, but between a crash and the next start they still
// point at the freed ports. A --proxy-port-range below
// net.ipv4.ip_unprivileged_port_start closes that window there.
func warnUnprivilegedProxyPorts(logger klog.Logger, sysctls sysctl.Sysctls, r ports.Range, why string) {
	start := 1024 // the kernel's default
	if sysctls != nil {
		if v, err := sysctls.Read("net/ipv4/ip_unprivileged_port_start"); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				start = n
			}
		}
	}
	if !r.KernelChosen() && int(r.Hi) < start {
		return
	}
	logger.Info("Proxy ports can be bound by unprivileged users: after a crash, until the next start, one who binds a freed port "+
		"would receive a service's traffic; a --proxy-port-range below net.ipv4.ip_unprivileged_port_start closes that window",
		"reason", why, "proxyPortRange", r.String(), "unprivilegedPortStart", start)
}

// markRelaySocket sets IP_TRANSPARENT (IPV6_TRANSPARENT) on a REDIRECT
// portal's relay socket where its family's rules check for it
// (portal.Node.CheckSocket). Setting it takes CAP_NET_ADMIN or CAP_NET_RAW,
// so no unprivileged process's socket carries it. Unlike a socket mark, the
// kernel keeps the flag on the socket's request and TIME_WAIT states too,
// which -m socket finds for a SYN that reuses a recent connection's ports.
// The flag only lets a socket use addresses that are not local; the relays
// use none.
func (m *Mode) markRelaySocket(r *relay, raw syscall.RawConn) error {
	if r.local || !m.socketChecked[r.key.Family] {
		return nil
	}
	var sockErr error
	err := raw.Control(func(fd uintptr) { sockErr = setTransparent(int(fd), r.key.Family) })
	if err == nil {
		err = sockErr
	}
	return err
}

// setTransparent sets IP_TRANSPARENT or IPV6_TRANSPARENT on fd.
func setTransparent(fd int, fam ipfamily.Family) error {
	level, opt, name := unix.SOL_IP, unix.IP_TRANSPARENT, "IP_TRANSPARENT"
	if fam == ipfamily.IPv6 {
		level, opt, name = unix.SOL_IPV6, unix.IPV6_TRANSPARENT, "IPV6_TRANSPARENT"
	}
	if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
		return fmt.Errorf("marking the proxy socket as kproxy's (%s): %w", name, err)
	}
	return nil
}

// canMarkSockets says whether this process may mark fam's relay sockets
// (markRelaySocket), on a throwaway socket: without CAP_NET_ADMIN or
// CAP_NET_RAW it may not, and then the rules must not expect it.
func canMarkSockets(fam ipfamily.Family) error {
	fd, err := unix.Socket(fam.Domain(), unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("a %s socket to try IP_TRANSPARENT on: %w", fam, err)
	}
	defer unix.Close(fd)
	return setTransparent(fd, fam)
}
