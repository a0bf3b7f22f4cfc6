package lab

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTopology builds a dual-stack topology with servers in a subtest and
// checks, from the client, that every server on every backend is reachable
// through the node; once the subtest has ended, that nothing it created
// (namespaces, processes) is left.
func TestTopology(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	var namespaces []string
	var pids []int
	t.Run("build and reach", func(t *testing.T) {
		topo := NewTopology(t, TopologyOptions{DualStack: true})
		srv := StartServers(t, topo, ServerOptions{LargeFileBytes: 3<<20 + 17})
		namespaces = topo.Namespaces()
		for _, p := range append(srv.Nginx, srv.Iperf...) {
			pids = append(pids, p.Pid())
		}
		if len(topo.Backends) != 3 || len(srv.Nginx) != 3 || len(srv.Iperf) != 3 {
			t.Fatalf("want 3 backends with nginx and iperf3, got %d backends, %d nginx, %d iperf3",
				len(topo.Backends), len(srv.Nginx), len(srv.Iperf))
		}
		for _, ns := range namespaces {
			if _, err := os.Stat(netnsDir + "/" + ns); err != nil {
				t.Errorf("namespace %s should exist while the test runs: %v", ns, err)
			}
		}
		for _, family := range []int{4, 6} {
			for _, b := range topo.Backends {
				t.Run(fmt.Sprintf("%s IPv%d", b.Name, family), func(t *testing.T) {
					checkBackendFromClient(t, topo, srv, b, b.Addr(family))
				})
			}
		}
		t.Run("iperf3", func(t *testing.T) {
			out := topo.Client.MustExec("iperf3", "--client", topo.Backends[0].IPv4.String(), "--bytes", "4M", "--json")
			if !strings.Contains(out, `"sum_received"`) {
				t.Fatalf("iperf3 client got no result:\n%s", out)
			}
		})
		t.Run("routes", func(t *testing.T) { checkRoutes(t, topo) })
	})

	left, err := listNamespaces(fmt.Sprintf("%s%d-", NamespacePrefix, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("namespaces left after the test: %v", left)
	}
	if len(namespaces) != 4 {
		t.Errorf("the topology had namespaces %v, want a client and 3 backends", namespaces)
	}
	for _, pid := range pids {
		if runningPid(pid) {
			t.Errorf("server pid %d still running after the test", pid)
		}
	}
	if out := Run(t, "ip", "-o", "link", "show"); strings.Contains(out, "br-pods") || strings.Contains(out, "to-client") {
		t.Errorf("links left on the node after the test:\n%s", out)
	}
}

// checkBackendFromClient talks to every server of backend b at addr from the
// client host, in-process (InNetns) and with real clients (Exec).
func checkBackendFromClient(t *testing.T, topo *Topology, srv *Servers, b *Host, addr netip.Addr) {
	httpAddr := netip.AddrPortFrom(addr, NginxPort).String()

	out := topo.Client.MustExec("curl", "-sS", "--max-time", "5", "http://"+httpAddr+"/")
	if out != b.Name+"\n" {
		t.Errorf("curl from the client to nginx at %s: got %q, want %q", httpAddr, out, b.Name+"\n")
	}

	client := topo.Client.HTTPClient()
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + httpAddr + LargeFileURLPath)
	if err != nil {
		t.Fatalf("GET the large file from %s: %v", httpAddr, err)
	}
	hash := sha256.New()
	n, err := io.Copy(hash, resp.Body)
	resp.Body.Close()
	if err != nil || n != srv.LargeFileBytes || hex.EncodeToString(hash.Sum(nil)) != srv.LargeFileSHA256 {
		t.Errorf("large file from %s: %d bytes (want %d), sha256 match %v, err %v",
			httpAddr, n, srv.LargeFileBytes, hex.EncodeToString(hash.Sum(nil)) == srv.LargeFileSHA256, err)
	}

	// The client's source address is its own, not the node's: the node
	// routes, it does not masquerade.
	conn, err := topo.Client.Dial("tcp", httpAddr)
	if err != nil {
		t.Fatalf("dialling %s from the client: %v", httpAddr, err)
	}
	local := conn.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	conn.Close()
	if local != topo.Client.Addr(familyOf(addr)) {
		t.Errorf("connection to %s left from %v, want the client's %v", httpAddr, local, topo.Client.Addr(familyOf(addr)))
	}

	pc, err := topo.Client.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	echo := net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, UDPEchoPort))
	if got := udpRoundTrip(t, pc, echo, []byte("ping")); got != b.Name+" ping" {
		t.Errorf("UDP echo at %v: got %q, want %q", echo, got, b.Name+" ping")
	}
	if familyOf(addr) == 4 {
		// A maximal IPv4 datagram comes back whole from the plain echo
		// (fragmented on the 1500-byte links both ways).
		big := make([]byte, MaxUDPPayload)
		for i := range big {
			big[i] = byte(i * 7)
		}
		plain := net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, UDPPlainEchoPort))
		if got := udpRoundTrip(t, pc, plain, big); got != string(big) {
			t.Errorf("plain UDP echo at %v: got %d bytes back, want the %d sent", plain, len(got), len(big))
		}
	}

	digest := netip.AddrPortFrom(addr, TCPDigestPort).String()
	dc, err := topo.Client.Dial("tcp", digest)
	if err != nil {
		t.Fatalf("dialling the digest server %s: %v", digest, err)
	}
	defer dc.Close()
	payload := []byte(strings.Repeat("half-close ", 10000))
	if _, err := dc.Write(payload); err != nil {
		t.Fatal(err)
	}
	if err := dc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = dc.SetReadDeadline(time.Now().Add(10 * time.Second))
	reply, err := bufio.NewReader(dc).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the digest reply from %s: %v", digest, err)
	}
	sum := sha256.Sum256(payload)
	name, n2, sha, err := ParseTCPDigestReply(reply)
	if err != nil || name != b.Name || n2 != int64(len(payload)) || sha != hex.EncodeToString(sum[:]) {
		t.Errorf("digest server %s answered %q (err %v), want %s %d %x", digest, reply, err, b.Name, len(payload), sum)
	}
}

func udpRoundTrip(t *testing.T, pc net.PacketConn, to net.Addr, msg []byte) string {
	t.Helper()
	if _, err := pc.WriteTo(msg, to); err != nil {
		t.Fatalf("sending to %v: %v", to, err)
	}
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2*MaxUDPPayload)
	n, _, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no reply from %v: %v", to, err)
	}
	return string(buf[:n])
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// checkRoutes checks that VIPs leave the client towards the node and that
// the node forwards.
func checkRoutes(t *testing.T, topo *Topology) {
	for _, dst := range []string{"198.18.0.10", "fd00:18::10"} {
		out := topo.Client.MustExec("ip", "route", "get", dst)
		want := "via " + topo.Node.IPv4.String()
		if strings.Contains(dst, ":") {
			want = "via " + topo.Node.IPv6.String()
		}
		if !strings.Contains(out, want) {
			t.Errorf("client route to VIP %s: %q, want %q", dst, out, want)
		}
	}
	for _, b := range topo.Backends {
		if out := b.MustExec("ip", "route", "get", "198.19.0.2"); !strings.Contains(out, "via "+topo.Node.PodIPv4.String()) {
			t.Errorf("%s's route to the client: %q, want via the node's bridge address", b.Name, out)
		}
	}
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err != nil || strings.TrimSpace(string(data)) != "1" {
		t.Errorf("ip_forward on the node = %q (%v), want 1", data, err)
	}
}

func TestTopologyIPv4OnlyHasNoIPv6(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	topo := NewTopology(t, TopologyOptions{Backends: 4})
	if len(topo.Backends) != 4 || topo.Backends[3].IPv4 != netip.MustParseAddr("198.19.1.14") || topo.Backends[3].Name != "backend-4" {
		t.Fatalf("backends: %v", topo.Backends)
	}
	if topo.Client.IPv6.IsValid() || topo.Backends[0].IPv6.IsValid() {
		t.Errorf("an IPv4-only topology should have no IPv6 addresses")
	}
	if out := topo.Backends[0].MustExec("ip", "-6", "addr", "show", "scope", "global"); strings.Contains(out, "fd00") {
		t.Errorf("IPv6 address on an IPv4-only backend:\n%s", out)
	}
	if topo.Host("backend-4") != topo.Backends[3] || topo.Host("node") != topo.Node || topo.Host("nope") != nil {
		t.Errorf("Host lookup by name is wrong")
	}
	// Backend to backend over the bridge, and backend to client via the node.
	ln, err := topo.Backends[3].Listen("tcp", ":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, from := range []*Host{topo.Backends[0], topo.Client, topo.Node} {
		c, err := from.Dial("tcp", "198.19.1.14:7000")
		if err != nil {
			t.Errorf("dialling backend-4 from %s: %v", from.Name, err)
			continue
		}
		c.Close()
	}
}

func TestInNetnsRestoresThread(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	topo := NewTopology(t, TopologyOptions{Backends: 1})
	self, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var inside string
	for range 50 { // many calls: a leaked namespace switch would show on some thread
		if err := topo.Client.InNetns(func() (err error) {
			inside, err = os.Readlink("/proc/thread-self/ns/net")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if inside == self {
			t.Fatalf("InNetns ran in the caller's namespace %s", self)
		}
	}
	// After all those switches, no thread of the process is left in the
	// client's namespace.
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ns, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
		if err == nil && ns == inside {
			t.Errorf("thread %s is still in the client's namespace", task.Name())
		}
	}

	if err := topo.Client.InNetns(func() error { return fmt.Errorf("boom") }); err == nil || err.Error() != "boom" {
		t.Errorf("InNetns should return fn's error, got %v", err)
	}
	if err := topo.Client.InNetns(func() error { runtime.Goexit(); return nil }); err == nil || !strings.Contains(err.Error(), "Goexit") {
		t.Errorf("a Goexit in fn should come back as an error, got %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("a panic in fn should be re-raised in the caller, got %v", r)
			}
		}()
		_ = topo.Client.InNetns(func() error { panic("kaboom") })
	}()
}

func TestStartStopsAndReportsProcesses(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	topo := NewTopology(t, TopologyOptions{Backends: 1})
	b := topo.Backends[0]
	// A process with a child: Stop ends both (the whole process group).
	p := b.Start("sh", "-c", `echo started; sleep 300 & echo "child $!"; wait`)
	if err := b.WaitListening("tcp", 1, 50*time.Millisecond, nil); err == nil {
		t.Errorf("WaitListening on a port nobody listens on should time out")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.Log(), "started") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(p.Log(), "started") {
		t.Fatalf("process output not captured in %s: %q", p.LogPath, p.Log())
	}
	nsOf := func(pid int) string { s, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); return s }
	var st1, st2 syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", p.Pid()), &st1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(netnsDir+"/"+b.Netns, &st2); err != nil {
		t.Fatal(err)
	}
	if st1.Ino != st2.Ino {
		t.Errorf("process runs in namespace %s, not %s's", nsOf(p.Pid()), b.Name)
	}
	// The log's header echoes the command, which also holds "child ": wait
	// for the line the shell prints.
	childLine := regexp.MustCompile(`(?m)^child (\d+)$`)
	for childLine.FindStringSubmatch(p.Log()) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	m := childLine.FindStringSubmatch(p.Log())
	if m == nil {
		t.Fatalf("no child pid in the log %q", p.Log())
	}
	child, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	// The child was re-parented when sh died; it may linger as a zombie
	// until its new parent reaps it, which is dead enough.
	for time.Now().Before(deadline) && runningPid(child) {
		time.Sleep(10 * time.Millisecond)
	}
	if runningPid(child) {
		t.Errorf("child pid %d of the stopped process still running", child)
	}
	if p.ExitCode() == 0 {
		t.Errorf("a killed process should not exit 0")
	}
	if err := p.Stop(); err != nil {
		t.Errorf("a second Stop should be a no-op, got %v", err)
	}

	// A server that exits at once makes WaitListening fail early with its log.
	q := b.Start("sh", "-c", "echo no-such-server; exit 3")
	err = q.WaitListening("tcp", 4444, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "no-such-server") {
		t.Errorf("WaitListening on an exited server: want an error with its log, got %v", err)
	}
	if q.ExitCode() != 3 {
		t.Errorf("exit code = %d, want 3", q.ExitCode())
	}
}

func TestSweepRemovesNamespacesOfDeadTestProcesses(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-abcdef-client", NamespacePrefix, dead.Process.Pid)
	live := fmt.Sprintf("%s%d-abcdef-client", NamespacePrefix, os.Getpid())
	Run(t, "ip", "netns", "add", stale)
	Run(t, "ip", "netns", "add", live)
	t.Cleanup(func() { _ = deleteNamespaces(stale); _ = deleteNamespaces(live) })

	NewTopology(t, TopologyOptions{Backends: 1})
	if _, err := os.Stat(netnsDir + "/" + stale); !os.IsNotExist(err) {
		t.Errorf("stale namespace %s of dead pid %d should have been swept (stat: %v)", stale, dead.Process.Pid, err)
	}
	if _, err := os.Stat(netnsDir + "/" + live); err != nil {
		t.Errorf("namespace %s of a live process must be kept: %v", live, err)
	}
}

func TestNewTopologyRejectsBadOptions(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	NewTopology(t, TopologyOptions{Backends: 1})
	for _, opts := range []TopologyOptions{{Backends: -1}, {Backends: maxBackends + 1}, {MTU: 100}, {} /* a second topology in one namespace */} {
		if topo, err := newTopology(t, opts); err == nil {
			topo.remove()
			t.Errorf("newTopology(%+v) should fail", opts)
		}
	}
}

func TestParseTCPDigestReply(t *testing.T) {
	for _, tc := range []struct {
		reply   string
		name    string
		n       int64
		wantErr bool
	}{
		{reply: "backend-2 42 abc\n", name: "backend-2", n: 42},
		{reply: "backend-2 x abc\n", wantErr: true},
		{reply: "", wantErr: true},
	} {
		name, n, sha, err := ParseTCPDigestReply(tc.reply)
		if (err != nil) != tc.wantErr || name != tc.name || n != tc.n || (!tc.wantErr && sha != "abc") {
			t.Errorf("ParseTCPDigestReply(%q) = %q, %d, %q, %v", tc.reply, name, n, sha, err)
		}
	}
}

func TestNginxConfigNamesTheBackend(t *testing.T) {
	h := &Host{Name: "backend-7", IPv6: netip.MustParseAddr("fd00:19:1::17")}
	conf := nginxConfig("/tmp/x", h, "/tmp/data")
	for _, want := range []string{`return 200 "backend-7\n";`, "listen 8080 ", "listen [::]:8080", "daemon off;", "master_process off;", "alias /tmp/data/;", "pid /tmp/x/nginx.pid;"} {
		if !strings.Contains(conf, want) {
			t.Errorf("nginx config lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(nginxConfig("/tmp/x", &Host{Name: "b"}, "/d"), "[::]") {
		t.Errorf("an IPv4-only backend's nginx should not listen on IPv6")
	}
}

// runningPid reports whether pid exists and is not a zombie.
func runningPid(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, so split after the last ')'.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}
