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
)

// Faults in the services file itself (issue 18, items 3 and 7): an editor
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
// whole file with a second open.
func rewriteInPlace(path, content string, i int) error {
	if i%2 == 1 {
		if err := os.Truncate(path, 0); err != nil {
			return err
		}
		time.Sleep(rewritePause)
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
// with the services file named directly and with its directory.
func TestServicesFileRewrittenInPlace(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
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
