package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Cases of the modes that write kube-proxy's iptables rule model.

func hasIPTablesRules(m proxyMode) bool { return m.iptablesRules }

// resyncPeriod is the --iptables-sync-period of the cases that break the
// rules behind kproxy's back: every periodic sync checks the canary chains.
const resyncPeriod = 2 * time.Second

// canaryChain is the empty chain kube-proxy (and kproxy) keeps in each table
// it writes, whose absence shows someone flushed the table.
const canaryChain = "KUBE-PROXY-CANARY"

const (
	restoreFailuresMetric = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"
	rulesTotalMetric      = "kubeproxy_sync_proxy_rules_iptables_total"
)

func TestFlushedRulesAreRestored(t *testing.T) {
	forModes(t, hasIPTablesRules, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m, "--iptables-sync-period="+resyncPeriod.String())
		if l == nil {
			return
		}
		askWeb := askHTTP(l.topo.Client, "http://"+webVIP+"/")
		l.wantBalanced(t, "TCP ClusterIP before the flush", askWeb)

		node := l.topo.Node
		// The nat table flushed and its chains deleted, and the mangle
		// canary deleted, in one restore (see firewallReload).
		reloadFirewall(t, l, firewallReload{payload: "*nat\n-F\n-X\nCOMMIT\n*mangle\n-X " + canaryChain + "\nCOMMIT\n", noflush: true})
		flushed := time.Now()
		// The next periodic sync finds the canaries gone and writes
		// everything again.
		lab.Eventually(t, "a periodic sync restoring the nat rules", func() (bool, string) {
			l.alive(t)
			// Ask only once the service's rule and the jump to it are
			// back: a request sent in between waits out its timeout.
			save := l.natRules(t)
			if !strings.Contains(save, webVIP+"/32") || !regexp.MustCompile(`(?m)^-A PREROUTING .*-j KUBE-SERVICES$`).MatchString(save) {
				return false, save
			}
			seen, err := spreadOver(3, askWeb)
			return err == nil && len(seen) == 3, fmt.Sprint(seen, err)
		})
		t.Logf("traffic flowed again %v after the flush", time.Since(flushed))
		// The canary check did it, not the hourly full sync.
		if log := l.kproxy.Log(); !strings.Contains(log, "A canary chain is gone") {
			t.Errorf("kproxy's log does not say it found a canary chain gone:\n%s", log)
		}
		for _, table := range []string{"mangle", "nat", "filter"} {
			if out, err := node.Exec("iptables", "-t", table, "-S", canaryChain); err != nil {
				t.Errorf("the %s canary chain was not restored: %v\n%s", table, err, out)
			}
		}
		l.wantBalanced(t, "TCP ClusterIP after the restore", askWeb)
	})
}

// failingRestore makes a directory holding an iptables-nft-restore that
// fails while the returned marker file exists, and runs the real one
// otherwise; put the directory first on kproxy's PATH.
func failingRestore(t *testing.T) (dir, marker string) {
	t.Helper()
	dir = t.TempDir()
	marker = filepath.Join(dir, "fail")
	for _, name := range []string{"iptables-nft-restore", "iptables-legacy-restore"} {
		real, err := lookPathOutside(name, dir)
		if err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf("#!/bin/sh\nif [ -e %q ]; then\n\tcat >/dev/null\n\techo 'injected failure: %s' >&2\n\texit 1\nfi\nexec %q \"$@\"\n",
			marker, name, real)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatalf("writing the %s wrapper: %v", name, err)
		}
	}
	return dir, marker
}

// lookPathOutside finds name on PATH, skipping dir.
func lookPathOutside(name, dir string) (string, error) {
	for _, p := range filepath.SplitList(os.Getenv("PATH")) {
		if p == dir || p == "" {
			continue
		}
		path := filepath.Join(p, name)
		if info, err := os.Stat(path); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s is not on PATH (%s)", name, os.Getenv("PATH"))
}

// counter reads an unlabelled counter of kproxy's, failing t if it is
// missing or not a number.
func counter(t *testing.T, name string) float64 {
	t.Helper()
	v, ok := lab.Metric(name)
	if !ok {
		t.Fatalf("%s is not in kproxy's metrics", name)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", name, v, err)
	}
	return f
}

func TestRestoreFailureKeepsRules(t *testing.T) {
	forModes(t, hasIPTablesRules, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		dir, marker := failingRestore(t)
		l.runKproxy(t, []string{"PATH=" + dir + string(filepath.ListSeparator) + os.Getenv("PATH")},
			"--iptables-sync-period="+resyncPeriod.String())
		askWeb := askHTTP(l.topo.Client, "http://"+webVIP+"/")
		l.wantBalanced(t, "TCP ClusterIP before the failures", askWeb)
		failures := counter(t, restoreFailuresMetric)
		before := l.natRules(t)

		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		l.write(t, coreServices{backends: l.backends, webBackends: l.backendsExcept("backend-3"), stickyTimeout: 60}.render())
		lab.Eventually(t, "a failed iptables-restore to be counted", func() (bool, string) {
			l.alive(t)
			v, _ := lab.Metric(restoreFailuresMetric)
			f, err := strconv.ParseFloat(v, 64)
			return err == nil && f > failures, v
		})
		t.Run("the previous rules stay in force", func(t *testing.T) {
			if after := l.natRules(t); after != before {
				t.Errorf("the nat table changed although every restore failed.\nbefore:\n%s\nafter:\n%s", before, after)
			}
			// backend-3 was removed by the change that could not be written.
			l.wantBalanced(t, "TCP ClusterIP while restores fail", askWeb)
		})
		t.Run("the change lands once restores work again", func(t *testing.T) {
			if err := os.Remove(marker); err != nil {
				t.Fatal(err)
			}
			lab.Eventually(t, "backend-3 leaving the rotation", func() (bool, string) {
				seen, err := spreadOver(2, askWeb)
				return err == nil && len(seen) == 2 && seen["backend-3"] == 0, fmt.Sprint(seen, err)
			})
		})
	})
}

func TestRulesMetric(t *testing.T) {
	forModes(t, hasIPTablesRules, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		samples, err := lab.MetricSamples(rulesTotalMetric)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range samples {
			labels, value, _ := strings.Cut(s, " ")
			if !strings.Contains(labels, `table="nat"`) || !strings.Contains(labels, `ip_family="IPv4"`) {
				continue
			}
			n, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			// The count covers kproxy's own rules, so it lies between one
			// and every rule of the table.
			written := strings.Count(l.natRules(t), "\n-A ")
			if n < 1 || int(n) > written {
				t.Fatalf("%s: %v nat rules, want between 1 and the %d rules of the nat table", s, n, written)
			}
			t.Logf("%s (the nat table holds %d rules)", s, written)
			return
		}
		t.Fatalf("no IPv4 nat sample of %s among %q", rulesTotalMetric, samples)
	})
}
