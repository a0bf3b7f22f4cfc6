package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// drainBound bounds how long a drained real server stays after its last
// connection ended: IPVS keeps a reset connection 10 s (CLOSE state) and
// kproxy checks draining real servers every 5 s.
const drainBound = 30 * time.Second

// ipvsStickyTimeout is the affinity timeout of the IPVS change cases. A
// persistence template that times out while a connection it steered is
// still known is given another 60 s, so only a timeout longer than the
// 10 s IPVS keeps a reset connection (its CLOSE state) can be watched
// expiring in a test.
const ipvsStickyTimeout = 12

// askResetting asks the web server behind vipPort over a new connection from
// d, then ends it with a reset, so IPVS forgets it after 10 s instead of the
// two minutes of TIME_WAIT.
func askResetting(d lab.Dialer, vipPort string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", vipPort)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	name, err := (&keptConn{conn: conn, r: bufio.NewReader(conn)}).ask()
	_ = conn.(*net.TCPConn).SetLinger(0)
	return name, err
}

// wantPersistenceExpiry checks ClientIP affinity expiring under IPVS: a
// client's connection ends with a reset, and once the timeout has passed
// the persistence template is gone and the round-robin scheduler moves on.
func wantPersistenceExpiry(t *testing.T, d lab.Dialer, vipPort string, timeout time.Duration) {
	t.Helper()
	first, err := askResetting(d, vipPort)
	if err != nil {
		t.Fatal(err)
	}
	var answers []string
	for range 3 {
		time.Sleep(timeout + time.Second)
		got, err := askResetting(d, vipPort)
		if err != nil {
			t.Fatal(err)
		}
		if got != first {
			return
		}
		answers = append(answers, got)
	}
	t.Fatalf("pinned to %s; after three waits longer than the %v timeout the answers were still %v", first, timeout, answers)
}

// keptConn is one keep-alive HTTP connection, for asking over it again.
type keptConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// ask sends GET / over the connection and returns the backend that answers.
func (k *keptConn) ask() (string, error) {
	_ = k.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(k.conn, "GET / HTTP/1.1\r\nHost: web\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(body)), err
}

// realServerWeight finds backend ip's real server line under the virtual server
// vip:port in `ipvsadm -Ln` and returns its weight, or -1 if it is absent.
func (l *e2eLab) realServerWeight(t *testing.T, vipPort, ip string) (int, string) {
	t.Helper()
	out := l.topo.Node.MustExec("ipvsadm", "-Ln", "-t", vipPort)
	m := regexp.MustCompile(`-> ` + regexp.QuoteMeta(ip) + `:\d+\s+\w+\s+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		return -1, out
	}
	var w int
	fmt.Sscan(m[1], &w)
	return w, out
}

func TestGracefulTermination(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.virtualServers }, func(t *testing.T, m proxyMode) {
		core := func(backends []string) coreServices {
			return coreServices{backends: backends, stickyTimeout: 60}
		}
		l := startLab(t, m, func(backends []string) string { return core(backends).render() })
		if l == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := l.topo.Client.DialContext(ctx, "tcp", webVIP+":80")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		kept := &keptConn{conn: conn, r: bufio.NewReader(conn)}
		pinned, err := kept.ask()
		if err != nil || !l.isBackend(pinned) {
			t.Fatalf("the kept connection's first answer: %q, %v", pinned, err)
		}
		pinnedIP := l.backends[l.backendIndex(pinned)]

		c := core(l.backends)
		c.webBackends = l.backendsExcept(pinned)
		l.write(t, c.render())
		lab.Within(t, changeBound, pinned+"'s real server draining with weight 0", func() (bool, string) {
			w, out := l.realServerWeight(t, webVIP+":80", pinnedIP)
			return w == 0, out
		})
		seen, err := spreadOver(2, askHTTP(l.topo.Client, "http://"+webVIP+"/"))
		if err != nil || seen[pinned] != 0 || len(seen) != 2 {
			t.Fatalf("new connections while %s drains: %v, %v; want only the two others", pinned, seen, err)
		}
		if again, err := kept.ask(); err != nil || again != pinned {
			t.Fatalf("the draining connection's next answer: %q, %v; want %s still serving it", again, err, pinned)
		}
		if w, out := l.realServerWeight(t, webVIP+":80", pinnedIP); w != 0 {
			t.Fatalf("the draining real server left while its connection was open:\n%s", out)
		}

		// A reset ends the connection at once for IPVS too (no FIN_WAIT).
		_ = conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
		lab.Within(t, drainBound, pinned+"'s real server deleted once its connection ended", func() (bool, string) {
			w, out := l.realServerWeight(t, webVIP+":80", pinnedIP)
			return w == -1, out
		})
	})
}

func TestIPVSStartup(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.virtualServers }, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		t.Run("a scheduler the kernel lacks stops kproxy at start, named", func(t *testing.T) {
			// The guest kernel has every scheduler kube-proxy accepts as
			// a module: hide one (the guest's root is a throwaway
			// overlay) so the kernel cannot load it.
			module := strings.TrimSpace(l.topo.Node.MustExec("modinfo", "-n", "ip_vs_sed"))
			if err := os.Rename(module, module+".hidden"); err != nil {
				t.Fatal(err)
			}
			defer os.Rename(module+".hidden", module)
			// Bounded: a kproxy that does not check would run on. The
			// bound is a start's (its kernel probe alone took 9 s in a
			// busy guest, and 20 s did not reach the check).
			bound := strconv.Itoa(int(firstSyncBound().Seconds()))
			args := append([]string{bound, l.bin}, kproxyArgs(m, "--services-file="+l.manifest)...)
			out, err := l.topo.Node.Exec("timeout", append(args, "--ipvs-scheduler=sed")...)
			if err == nil {
				t.Fatalf("kproxy with --ipvs-scheduler=sed started without the scheduler's module:\n%s", out)
			}
			if !strings.Contains(out, `no IPVS scheduler "sed"`) {
				t.Fatalf("kproxy's error does not name the scheduler:\n%s", out)
			}
			if state := l.topo.Node.MustExec("ipvsadm", "-Ln"); strings.Contains(state, "TCP") {
				t.Fatalf("the failed start left virtual servers:\n%s", state)
			}
		})
		t.Run("another scheduler is used for every virtual server", func(t *testing.T) {
			l.runKproxy(t, nil, "--ipvs-scheduler=wrr", "--ipvs-strict-arp")
			state := l.topo.Node.MustExec("ipvsadm", "-Ln", "-t", webVIP+":80")
			if !strings.Contains(state, webVIP+":80 wrr") {
				t.Fatalf("web's virtual server does not use wrr:\n%s", state)
			}
			l.wantBalanced(t, "web under wrr", askHTTP(l.topo.Client, "http://"+webVIP+"/"))
		})
		t.Run("the node is set up as the IPVS mode needs", func(t *testing.T) {
			for sysctl, want := range map[string]string{
				"net/ipv4/vs/conntrack": "1", "net/ipv4/vs/expire_nodest_conn": "1",
				"net/ipv4/vs/expire_quiescent_template": "1", "net/ipv4/ip_forward": "1",
				// --ipvs-strict-arp: kube-ipvs0's VIPs are not announced.
				"net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2",
			} {
				got, err := os.ReadFile("/proc/sys/" + sysctl)
				if err != nil || strings.TrimSpace(string(got)) != want {
					t.Errorf("sysctl %s = %q (%v), want %s", sysctl, got, err, want)
				}
			}
			link := l.topo.Node.MustExec("ip", "-d", "addr", "show", "kube-ipvs0")
			for _, want := range []string{"dummy", webVIP + "/32", externalIP + "/32", echoVIP + "/32"} {
				if !strings.Contains(link, want) {
					t.Errorf("kube-ipvs0 lacks %q:\n%s", want, link)
				}
			}
			if strings.Contains(link, "state UP") {
				t.Errorf("kube-ipvs0 is up; kube-proxy leaves it down:\n%s", link)
			}
		})
		t.Run("a rewritten layer keeps each jump into it once", func(t *testing.T) {
			// An endpoint leaving rewrites the iptables layer, and the
			// jumps are checked against iptables-save's text again.
			syncs := lab.SyncCount(t)
			l.write(t, renderCore(l.backends[:2]))
			lab.WaitSynced(t, l.kproxy, syncs+1)
			l.write(t, renderCore(l.backends))
			lab.WaitSynced(t, l.kproxy, syncs+2)
			for _, table := range []string{"nat", "filter"} {
				seen := map[string]bool{}
				save := l.topo.Node.MustExec(iptablesTool("iptables-save"), "-t", table)
				for _, line := range strings.Split(save, "\n") {
					chain, _, _ := strings.Cut(strings.TrimPrefix(line, "-A "), " ")
					if !strings.HasPrefix(line, "-A ") || strings.HasPrefix(chain, "KUBE-") {
						continue
					}
					if seen[line] {
						t.Errorf("%s holds %q twice:\n%s", table, line, save)
					}
					seen[line] = true
				}
			}
		})
	})
}
