package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Faults in the services file itself: an editor
// that saves in place, and content the API server would have refused.

const (
	// rewrites is how many in-place saves the rewrite case makes.
	rewrites = 100
	// rewritePause separates a save's steps: longer than kproxy's 100 ms
	// debounce, so a read between them sees the file empty or half written.
	rewritePause = 150 * time.Millisecond
)

// rewriteInPlace saves content over path as an editor that does not save
// atomically: even saves truncate, pause, write half, pause, write the rest
// through one descriptor; odd ones truncate and close, pause, then write the
// whole file with a second open (every other one pausing long enough for
// kproxy to read the empty file).
func rewriteInPlace(path, content string, i int) error {
	if i%2 == 1 {
		if err := os.Truncate(path, 0); err != nil {
			return err
		}
		pause := rewritePause
		if i%4 == 1 {
			pause = 4 * rewritePause
		}
		time.Sleep(pause)
		return os.WriteFile(path, []byte(content), 0o644)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	half := len(content) / 2
	time.Sleep(rewritePause)
	if _, err := f.WriteString(content[:half]); err != nil {
		f.Close()
		return err
	}
	time.Sleep(rewritePause)
	if _, err := f.WriteString(content[half:]); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// trafficCount is what a stream of requests saw.
type trafficCount struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	firstErrors  []string
}

func (c *trafficCount) record(err error) {
	c.sent.Add(1)
	if err == nil {
		return
	}
	c.failed.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.firstErrors) < 5 {
		c.firstErrors = append(c.firstErrors, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
	}
}

func (c *trafficCount) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d of %d failed; first failures: %s", c.failed.Load(), c.sent.Load(), strings.Join(c.firstErrors, "; "))
}

// TestServicesFileRewrittenInPlace saves the services file in place 100
// times while a keep-alive connection and a stream of new connections use a
// service: kproxy must never apply the empty or half-written file it may
// read meanwhile, so no request fails and the connection stays up. It runs
// with the services file named directly and with its directory. The file is
// read the same way whatever the mode, so two modes stand for all: one that
// relays (REDIRECT portals) and one whose kernel rules NAT (iptables); a
// services file applied empty would drop the service's traffic in either.
func TestServicesFileRewrittenInPlace(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.name == "userspace" || m.iptablesRules }, func(t *testing.T, m proxyMode) {
		for _, asDir := range []bool{false, true} {
			name := "file"
			if asDir {
				name = "directory"
			}
			t.Run(name, func(t *testing.T) {
				l := newLab(t, m, renderCore)
				if l == nil {
					return
				}
				source := "--services-file=" + l.manifest
				if asDir {
					source = "--services-file=" + filepath.Dir(l.manifest)
				}
				l.runKproxyOn(t, source, nil)
				rewriteUnderTraffic(t, l, renderCore(l.backends))
			})
		}
	})
}

func rewriteUnderTraffic(t *testing.T, l *e2eLab, content string) {
	t.Helper()
	conn, err := l.topo.Client.Dial("tcp", webVIP+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kept := &keptConn{conn: conn, r: bufio.NewReader(conn)}
	if _, err := kept.ask(); err != nil {
		t.Fatalf("the first request on the keep-alive connection: %v", err)
	}

	var fresh, onKept trafficCount
	stop := make(chan struct{})
	done := make(chan struct{})
	ask := askHTTP(l.topo.Client, "http://"+webVIP+"/")
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := ask()
			fresh.record(err)
			_, err = kept.ask()
			onKept.record(err)
			time.Sleep(20 * time.Millisecond)
		}
	}()

	start := time.Now()
	for i := range rewrites {
		if err := rewriteInPlace(l.manifest, content, i); err != nil {
			close(stop)
			<-done
			t.Fatalf("save %d: %v", i+1, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Let the last save settle and be read before counting.
	time.Sleep(time.Second)
	close(stop)
	<-done
	l.alive(t)

	t.Logf("%d in-place saves in %v; new connections: %s", rewrites, time.Since(start).Round(time.Millisecond), &fresh)
	t.Logf("keep-alive connection: %s", &onKept)
	rejected, _ := lab.Metric("kproxy_services_file_rejected_files_total")
	t.Logf("kproxy waited for a save in progress %d times; services files rejected as a whole (read empty): %s",
		strings.Count(l.kproxy.Log(), "is being written"), rejected)
	if fresh.failed.Load() > 0 || onKept.failed.Load() > 0 {
		t.Errorf("requests failed while the services file was saved in place: new connections %d of %d, keep-alive %d of %d",
			fresh.failed.Load(), fresh.sent.Load(), onKept.failed.Load(), onKept.sent.Load())
		t.Logf("kproxy's log (services file lines):\n%s", grepLines(l.kproxy.Log(), "Services file", 40))
	}
}

// grepLines returns the first max lines of log that contain word.
func grepLines(log, word string, max int) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, word) {
			out = append(out, line)
			if len(out) == max {
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// Addresses of the hostile services file.
const (
	leakVIP    = "198.18.0.70"
	sshNodeVIP = "198.18.0.71"
	// mappedVIP is written IPv4-mapped (::ffff:198.18.0.72) as a cluster IP.
	mappedVIP = "198.18.0.72"
)

// hostileServices renders what the API server would refuse, next to a
// valid web (endpoints backend-2 and backend-3): a slice sending a service
// to the node's 127.0.0.1:2222, a cluster IP of 127.0.0.1 on kproxy's metrics
// port, a second service on web's cluster IP (backend-1 behind it, and
// first in the file), a node port of 22, and an IPv4-mapped IPv6 cluster IP.
func hostileServices(backends []string) string {
	all := remoteEndpoints(backends, "")
	return docs(nodeDoc,
		httpService("thief", webVIP, ""), httpSlice("thief", all[0]),
		httpService("web", webVIP, ""), httpSlice("web", all[1:]...),
		serviceDoc("leak", "clusterIP: "+leakVIP+", ports: [{name: ssh, port: 22, targetPort: 2222}]", ""),
		sliceDoc("leak-1", "leak", "{name: ssh, port: 2222, protocol: TCP}", endpoint("127.0.0.1", "node", "")),
		serviceDoc("metrics", "clusterIP: 127.0.0.1, ports: [{name: http, port: 10249, targetPort: 8080}]", ""),
		httpSlice("metrics", all...),
		serviceDoc("ssh", "type: NodePort, clusterIP: "+sshNodeVIP+", ports: [{name: http, port: 80, targetPort: 8080, nodePort: 22}]", ""),
		httpSlice("ssh", all...),
		serviceDoc("mapped", `clusterIP: "::ffff:`+mappedVIP+`", ports: [{name: http, port: 80, targetPort: 8080}]`, ""),
		httpSlice("mapped", all...),
	)
}

// serveGreeting serves greeting on h at addr until the test ends.
func serveGreeting(t *testing.T, h *lab.Host, addr, greeting string) {
	t.Helper()
	ln, err := h.Listen("tcp4", addr)
	if err != nil {
		t.Fatalf("listening on %s on %s: %v", addr, h.Name, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(greeting))
			c.Close()
		}
	}()
}

// TestServicesFileRefusesWhatTheAPIServerRefuses applies a services file
// holding what the API server would refuse and checks
// that none of it reaches the data path: the node's localhost-only port is
// not exposed through a 127.0.0.1 endpoint, kproxy's metrics port stays its
// own, web keeps its cluster IP against a later service, the node's sshd
// keeps port 22. Each rejection names the field.
func TestServicesFileRefusesWhatTheAPIServerRefuses(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, func(backends []string) string {
			all := remoteEndpoints(backends, "")
			return docs(nodeDoc, httpService("web", webVIP, ""), httpSlice("web", all[1:]...))
		})
		if l == nil {
			return
		}
		serveGreeting(t, l.topo.Node, "127.0.0.1:2222", "localhost-only")
		serveGreeting(t, l.topo.Node, "0.0.0.0:22", "sshd")
		l.runKproxy(t, nil)
		l.write(t, hostileServices(l.backends))

		rejections := []string{
			`(EndpointSlice default/leak-1): endpoints[0].addresses[0]: \"127.0.0.1\" may not be in the loopback range`,
			`(Service default/metrics): spec.clusterIP: \"127.0.0.1\" may not be in the loopback range`,
			`(Service default/ssh): spec.ports[0].nodePort: 22 is not in the node port range 30000-32767`,
			`(Service default/thief): spec.clusterIPs[0]: cluster IP 198.18.0.10 is already allocated to Service default/web`,
			`(Service default/mapped): spec.clusterIP: \"::ffff:` + mappedVIP + `\" must not be an IPv4-mapped IPv6 address`,
		}
		lab.Eventually(t, "kproxy reading the new services file", func() (bool, string) {
			log := l.kproxy.Log()
			return strings.Contains(log, "generation=2"), grepLines(log, "Services file", 40)
		})
		// Let the reload's sync finish before probing (not through the
		// sync count: a cluster IP of 127.0.0.1 may have taken /metrics).
		time.Sleep(2 * time.Second)

		if got, err := lab.TCPGreeting(l.topo.Client, leakVIP+":22"); got == "localhost-only" {
			t.Errorf("the node's localhost-only port answered another host through a 127.0.0.1 endpoint (error %v)", err)
		}
		if got, err := lab.TCPGreeting(l.topo.Client, nodeIP+":22"); got != "sshd" {
			t.Errorf("the node's port 22 answered %q (error %v), want its own sshd: node port 22 must be refused", got, err)
		}
		if v, ok := lab.Metric(lab.SyncCountMetric); !ok {
			t.Errorf("kproxy's metrics port no longer serves its metrics (got %q): a cluster IP of 127.0.0.1 took it over", v)
		}
		seen, err := spreadOver(2, askHTTP(l.topo.Client, "http://"+webVIP+"/"))
		if err != nil || seen["backend-1"] > 0 || len(seen) == 0 {
			t.Errorf("web answered by %v (error %v), want only its own backends (backend-2, backend-3): a second service took over its cluster IP", seen, err)
		}
		if programmed, state := l.programs(t, mappedVIP); programmed {
			t.Errorf("the cluster IP written ::ffff:%s was programmed as %s:\n%s", mappedVIP, mappedVIP, state)
		}
		log := l.kproxy.Log()
		for _, r := range rejections {
			if !strings.Contains(log, r) {
				t.Errorf("kproxy's log does not reject with %s", r)
			}
		}
		if t.Failed() {
			t.Logf("kproxy's services file lines:\n%s", grepLines(log, "Services file", 40))
		}
	})
}
