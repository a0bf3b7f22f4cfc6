package syncscale

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

func TestParseRSS(t *testing.T) {
	tests := []struct {
		name       string
		status     string
		rss, peak  int64
		wantFailed bool
	}{
		{"both", "Name:\tkube-proxy\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t9\n", 100 << 20, 200 << 20, false},
		{"no peak", "VmRSS:\t 1 kB\n", 0, 0, true},
		{"bad unit", "VmRSS:\t 1 MB\nVmHWM:\t 1 kB\n", 0, 0, true},
		{"bad number", "VmRSS:\t x kB\nVmHWM:\t 1 kB\n", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rss, peak, err := ParseRSS(tt.status)
			if (err != nil) != tt.wantFailed || rss != tt.rss || peak != tt.peak {
				t.Errorf("ParseRSS = %d, %d, %v; want %d, %d, failed %v", rss, peak, err, tt.rss, tt.peak, tt.wantFailed)
			}
		})
	}
	if rss, peak, err := ReadRSS(os.Getpid()); err != nil || rss <= 0 || peak < rss {
		t.Errorf("ReadRSS(self) = %d, %d, %v", rss, peak, err)
	}
}

func TestParseCPU(t *testing.T) {
	stat := "4242 (kube proxy) S 1 4242 4242 0 -1 4194560 144 0 0 0 250 31 7 2 20 0 9 0 100 0 0"
	got, err := ParseCPU(stat)
	if want := (CPUTimes{Self: 2810 * time.Millisecond, Children: 90 * time.Millisecond}); err != nil || got != want {
		t.Errorf("ParseCPU = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"no command", "1 (x) S 1 2 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 1 1 1 1 1"} {
		if _, err := ParseCPU(bad); err == nil {
			t.Errorf("ParseCPU(%q) succeeded", bad)
		}
	}
	if _, err := ReadCPU(os.Getpid()); err != nil {
		t.Errorf("ReadCPU(self): %v", err)
	}
}

func TestParseStat(t *testing.T) {
	p, state, ok := parseStat("4242 (iptables-nft-re) S 1 4200 4200 0 -1 4194560 144 0 0 0")
	if !ok || p != (procInfo{pid: 4242, pgid: 4200, comm: "iptables-nft-re"}) || state != "S" {
		t.Errorf("parseStat = %+v, %q, %v", p, state, ok)
	}
	if p, _, ok := parseStat("7 (a (b) c) R 1 9 9"); !ok || p.comm != "a (b) c" || p.pgid != 9 {
		t.Errorf("parseStat with parentheses in comm = %+v, %v", p, ok)
	}
	if _, _, ok := parseStat("garbage"); ok {
		t.Error("parseStat accepted garbage")
	}
}

// TestStopGroup reproduces what a run once left behind: a proxy that
// exited while its child kept running, and a proxy tool outside the
// group. StopGroup must leave neither.
func TestStopGroup(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 1})
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	// A child named like a proxy tool, in the proxy's group, and one in a
	// group of its own.
	dir := t.TempDir()
	child, stray := filepath.Join(dir, "iptables-nft-restore"), filepath.Join(dir, "nft")
	for _, link := range []string{child, stray} {
		if err := os.Symlink(sleep, link); err != nil {
			t.Fatal(err)
		}
	}
	// Only the test's own children count: a node proxy elsewhere on the
	// machine runs its own iptables-nft-restore and nft.
	ours := func(p procInfo) bool {
		if p.comm != "nft" && p.comm != "iptables-nft-re" {
			return false
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		return err == nil && strings.HasPrefix(string(cmdline), dir+"/")
	}
	proc := topo.Node.StartFor(t, "sh", "-c", child+" 300 & setsid "+stray+" 300 & echo started; wait")
	deadline := time.Now().Add(5 * time.Second)
	for len(processes(ours)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the children did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The leader goes first, alone, as a crashed proxy would.
	if err := syscall.Kill(proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-proc.Exited()
	var logged []string
	if err := StopGroup(proc, func(f string, a ...any) { logged = append(logged, f) }); err != nil {
		t.Fatal(err)
	}
	if left := processes(ours); len(left) > 0 {
		t.Errorf("StopGroup left %v running", left)
	}
	if len(logged) != 1 {
		t.Errorf("StopGroup logged %d strays, want the one outside the group", len(logged))
	}
}
