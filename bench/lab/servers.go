package lab

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Ports of the servers StartServers runs on every backend.
const (
	// NginxPort: GET / answers "<backend name>\n"; GET /data/<file> serves
	// the shared files (LargeFilePath is /data/large.bin).
	NginxPort = 8080
	// UDPEchoPort answers each datagram with "<backend name> " followed by
	// the datagram (cut at MaxUDPPayload).
	UDPEchoPort = 9000
	// UDPPlainEchoPort sends each datagram back unchanged, for whole-datagram
	// checks up to MaxUDPPayload bytes and for raw request/response rates.
	UDPPlainEchoPort = 9001
	// TCPDigestPort reads a connection to EOF (the client's half-close),
	// then answers "<backend name> <bytes read> <sha256 hex>\n" and closes:
	// a half-close and upload-integrity check in one.
	TCPDigestPort = 9002
	// UDPSourcePort answers each datagram with "<backend name> <source
	// address>": the address the backend saw, as ClientAddressURLPath does
	// for TCP.
	UDPSourcePort = 9003
	// IperfPort is iperf3 -s.
	IperfPort = 5201

	// LargeFileURLPath is where nginx serves the shared large file.
	LargeFileURLPath = "/data/large.bin"
	// ClientAddressURLPath answers "<backend name> <client address>\n": the
	// source address the backend saw, to tell a NATed path from one that
	// keeps the client's address.
	ClientAddressURLPath = "/client-address"
	// MaxUDPPayload is the largest IPv4 UDP payload.
	MaxUDPPayload = 65507

	defaultLargeFileBytes = 8 << 20
	serverReadyTimeout    = 10 * time.Second
)

// ServerOptions selects what StartServers runs.
type ServerOptions struct {
	// LargeFileBytes is the size of the pseudo-random file every nginx
	// serves at LargeFileURLPath (default 8 MiB). One file is shared by all
	// backends, so a 1 GiB transfer test costs 1 GiB of disk, not N.
	LargeFileBytes int64
	// NoIperf skips iperf3 (it accepts one test at a time; benchmarks that
	// run their own may not want it).
	NoIperf bool
}

// Servers are the servers running on the backends.
type Servers struct {
	// LargeFilePath is the file behind LargeFileURLPath, LargeFileSHA256 its
	// digest (hex) and LargeFileBytes its size.
	LargeFilePath   string
	LargeFileSHA256 string
	LargeFileBytes  int64
	// Nginx and Iperf hold one process per backend, in backend order (Iperf
	// is empty with NoIperf).
	Nginx []*Process
	Iperf []*Process
}

// StartServers starts nginx, the UDP echo servers, the TCP digest server,
// the SCTP echo server (where the kernel has SCTP) and iperf3 on every
// backend of topo and waits until all of them listen. They are stopped when
// t ends (t may be a subtest of the topology's test).
func StartServers(t testing.TB, topo *Topology, opts ServerOptions) *Servers {
	t.Helper()
	if opts.LargeFileBytes == 0 {
		opts.LargeFileBytes = defaultLargeFileBytes
	}
	dataDir := filepath.Join(topo.logDir, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatalf("creating the shared data directory: %v", err)
	}
	s := &Servers{LargeFilePath: filepath.Join(dataDir, filepath.Base(LargeFileURLPath)), LargeFileBytes: opts.LargeFileBytes}
	sum, err := writePseudoRandomFile(s.LargeFilePath, opts.LargeFileBytes)
	if err != nil {
		t.Fatal(err)
	}
	s.LargeFileSHA256 = sum

	for _, b := range topo.Backends {
		s.Nginx = append(s.Nginx, StartNginx(t, b, dataDir))
		if !opts.NoIperf {
			s.Iperf = append(s.Iperf, b.StartFor(t, "iperf3", "--server", "--port", fmt.Sprint(IperfPort)))
		}
		for _, start := range []func(*Host) (io.Closer, error){startUDPEcho(true), startUDPEcho(false), startUDPSource, startTCPDigest, startSCTPEcho} {
			srv, err := start(b)
			if err != nil {
				t.Fatal(err)
			}
			if srv != nil {
				t.Cleanup(func() { srv.Close() })
			}
		}
	}
	// Wait for all at once: they start in parallel.
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(topo.Backends))
	wait := func(p *Process, network string, port int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.WaitListening(network, port, stretched(serverReadyTimeout)); err != nil {
				errs <- err
			}
		}()
	}
	for i := range topo.Backends {
		wait(s.Nginx[i], "tcp", NginxPort)
		if !opts.NoIperf {
			wait(s.Iperf[i], "tcp", IperfPort)
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return s
}

// StartNginx runs nginx on h as a single foreground process owned by the
// test (daemon off, master_process off), listening on NginxPort (IPv4, and
// IPv6 when h has an address), answering GET / with "<host name>\n" and
// serving dataDir under /data/. Its config, pid file and logs live in a
// TempDir; it does not wait for the port (see Process.WaitListening).
func StartNginx(t testing.TB, h *Host, dataDir string) *Process {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConfig(dir, h, dataDir)), 0o644); err != nil {
		t.Fatalf("writing nginx config for %s: %v", h.Name, err)
	}
	return h.StartFor(t, "nginx", "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
}

// nginxConfig is tuned for benchmarks too: no access log, keep-alive without
// a request cap, sendfile for the large file.
func nginxConfig(dir string, h *Host, dataDir string) string {
	listen6 := ""
	if h.IPv6.IsValid() {
		listen6 = fmt.Sprintf("listen [::]:%d ipv6only=on;", NginxPort)
	}
	tmp := func(name string) string { return filepath.Join(dir, "tmp-"+name) }
	return fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
worker_rlimit_nofile 65536;
events {
	worker_connections 32768;
	multi_accept on;
}
http {
	access_log off;
	client_body_temp_path %[2]s;
	proxy_temp_path %[3]s;
	fastcgi_temp_path %[4]s;
	uwsgi_temp_path %[5]s;
	scgi_temp_path %[6]s;
	default_type application/octet-stream;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 100000000;
	keepalive_timeout 300s;
	server {
		listen %[7]d default_server backlog=4096;
		%[8]s
		location / {
			return 200 "%[9]s\n";
		}
		location /data/ {
			alias %[10]s/;
		}
		location = %[11]s {
			return 200 "%[9]s $remote_addr\n";
		}
	}
}
`, dir, tmp("body"), tmp("proxy"), tmp("fastcgi"), tmp("uwsgi"), tmp("scgi"), NginxPort, listen6, h.Name, dataDir, ClientAddressURLPath)
}

// writePseudoRandomFile writes size bytes of a fixed pseudo-random stream
// (incompressible, so no layer can cheat) and returns its SHA-256.
func writePseudoRandomFile(path string, size int64) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("creating %s: %w", path, err)
	}
	hash := sha256.New()
	src := rand.NewChaCha8([32]byte{'k', 'p', 'r', 'o', 'x', 'y'})
	if _, err := io.CopyN(io.MultiWriter(f, hash), src, size); err != nil {
		f.Close()
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return hex.EncodeToString(hash.Sum(nil)), nil
}

// udpEchoReaders is how many goroutines serve one echo socket: enough to keep
// a 2-core machine's echo side from being the bottleneck of a rate test.
const udpEchoReaders = 2

// startUDPEcho returns a starter for the prefixed (UDPEchoPort) or plain
// (UDPPlainEchoPort) echo server, run in-process on a socket in h's
// namespace. It listens on both families when h has an IPv6 address.
func startUDPEcho(prefixed bool) func(h *Host) (io.Closer, error) {
	return func(h *Host) (io.Closer, error) {
		port, prefix := UDPPlainEchoPort, ""
		if prefixed {
			port, prefix = UDPEchoPort, h.Name+" "
		}
		conn, err := listenUDPOnEveryAddress(h, port)
		if err != nil {
			return nil, fmt.Errorf("UDP echo server on %s port %d: %w", h, port, err)
		}
		_ = conn.SetReadBuffer(4 << 20)
		_ = conn.SetWriteBuffer(4 << 20)
		for range udpEchoReaders {
			go ServeUDPEchoOn(conn, prefix)
		}
		return conn, nil
	}
}

// ServeUDPEchoOn answers datagrams on conn until it is closed, each with
// prefix followed by the datagram (cut at MaxUDPPayload). Benchmarks that
// give a backend several addresses serve a socket bound to each with it: a
// wildcard socket answers from the link's primary address, which the
// client's NAT would not recognise.
func ServeUDPEchoOn(conn *net.UDPConn, prefix string) {
	buf := make([]byte, len(prefix)+MaxUDPPayload+1)
	copy(buf, prefix)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf[len(prefix):])
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ICMP-induced errors; the server keeps serving
		}
		_, _ = conn.WriteToUDPAddrPort(buf[:min(len(prefix)+n, MaxUDPPayload)], from)
	}
}

// listenUDPOnEveryAddress opens a UDP socket on port of every address of h
// (both families when h has an IPv6 address), in h's namespace.
func listenUDPOnEveryAddress(h *Host, port int) (*net.UDPConn, error) {
	network, addr := "udp4", fmt.Sprintf("0.0.0.0:%d", port)
	if h.IPv6.IsValid() {
		network, addr = "udp", fmt.Sprintf("[::]:%d", port)
	}
	var conn *net.UDPConn
	err := h.InNetns(func() error {
		pc, err := net.ListenPacket(network, addr)
		if err != nil {
			return err
		}
		conn = pc.(*net.UDPConn)
		return nil
	})
	return conn, err
}

// startUDPSource runs the UDPSourcePort server in-process on h.
func startUDPSource(h *Host) (io.Closer, error) {
	conn, err := listenUDPOnEveryAddress(h, UDPSourcePort)
	if err != nil {
		return nil, fmt.Errorf("UDP source server on %s port %d: %w", h, UDPSourcePort, err)
	}
	go func() {
		buf := make([]byte, MaxUDPPayload)
		for {
			_, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			_, _ = conn.WriteToUDPAddrPort([]byte(h.Name+" "+from.Addr().Unmap().String()), from)
		}
	}()
	return conn, nil
}

// startTCPDigest runs the TCPDigestPort server in-process on h.
func startTCPDigest(h *Host) (io.Closer, error) {
	network, addr := "tcp4", fmt.Sprintf("0.0.0.0:%d", TCPDigestPort)
	if h.IPv6.IsValid() {
		network, addr = "tcp", fmt.Sprintf("[::]:%d", TCPDigestPort)
	}
	ln, err := h.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("TCP digest server on %s: %w", h, err)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off, keep serving
				continue
			}
			go serveTCPDigest(conn, h.Name)
		}
	}()
	return ln, nil
}

func serveTCPDigest(conn net.Conn, name string) {
	defer conn.Close()
	hash := sha256.New()
	n, err := io.Copy(hash, conn)
	if err != nil {
		return // a reset: the client sees its own error
	}
	fmt.Fprintf(conn, "%s %d %s\n", name, n, hex.EncodeToString(hash.Sum(nil)))
}

// ParseTCPDigestReply splits a TCPDigestPort answer into backend name, byte
// count and SHA-256 hex.
func ParseTCPDigestReply(reply string) (backend string, n int64, sha string, err error) {
	var parsed int
	parsed, err = fmt.Sscanf(strings.TrimSpace(reply), "%s %d %s", &backend, &n, &sha)
	if err != nil || parsed != 3 {
		return "", 0, "", fmt.Errorf("TCP digest reply %q: want \"<backend> <bytes> <sha256>\": %v", reply, err)
	}
	return backend, n, sha, nil
}
