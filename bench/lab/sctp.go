package lab

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"kproxy.dev/kproxy/lb/sctprelay"
)

// SCTPEchoPort answers each message of an SCTP association with
// "<backend name> " followed by the message, like UDPEchoPort. It runs only
// where the kernel has SCTP sockets (the guest kernel, not this host).
const SCTPEchoPort = 9003

// sctpAskTimeout bounds one SCTPAsk: the handshake and the answer.
const sctpAskTimeout = 3 * time.Second

// startSCTPEcho runs the SCTPEchoPort server in-process on h, or nothing
// (a nil closer) when the kernel has no SCTP sockets.
func startSCTPEcho(h *Host) (io.Closer, error) {
	if ok, _ := sctprelay.Supported(); !ok {
		return nil, nil
	}
	var ln *sctprelay.Listener
	err := h.InNetns(func() (err error) {
		ln, err = sctprelay.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), SCTPEchoPort))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("SCTP echo server on %s: %w", h, err)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				if errors.Is(err, os.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off, keep serving
				continue
			}
			go serveSCTPEcho(conn, h.Name+" ")
		}
	}()
	return ln, nil
}

// serveSCTPEcho answers every message until the peer ends the association.
func serveSCTPEcho(conn *sctprelay.Conn, prefix string) {
	defer conn.Close()
	buf := make([]byte, 64<<10)
	copy(buf, prefix)
	for {
		n, err := conn.Read(buf[len(prefix):])
		if err != nil || n == 0 {
			return
		}
		if _, err := conn.Write(buf[:len(prefix)+n]); err != nil {
			return
		}
	}
}

// SCTPAsk opens an SCTP association from h to addr, sends msg and returns
// the first message that comes back. The whole exchange is bounded.
func SCTPAsk(h *Host, addr netip.AddrPort, msg string) (string, error) {
	var conn *sctprelay.Conn
	err := h.InNetns(func() (err error) {
		conn, err = sctprelay.Dial(addr, sctpAskTimeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	// Conn has no deadlines: closing it ends a Read that waits too long.
	timer := time.AfterFunc(sctpAskTimeout, func() { conn.Close() })
	defer timer.Stop()
	if _, err := io.WriteString(conn, msg); err != nil {
		return "", fmt.Errorf("SCTP %v: sending: %w", addr, err)
	}
	buf := make([]byte, 64<<10)
	n, err := conn.Read(buf)
	if err != nil {
		return "", fmt.Errorf("SCTP %v: reading the answer: %w", addr, err)
	}
	return string(buf[:n]), nil
}
