package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Cases of the nftables mode: kube-proxy's nftables ruleset in the table
// kube-proxy of the ip and ip6 families, against the real kproxy binary and
// the real nft.

func hasNFTablesRules(m proxyMode) bool { return m.nftablesRules }

// nftResyncPeriod is the --nftables-sync-period of the cases that change
// the table behind kproxy's back: every periodic sync must notice.
const nftResyncPeriod = 2 * time.Second

// kube-proxy's nftables metrics (labelled by ip_family).
const (
	nftSyncFailuresMetric    = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"
	nftCleanupFailuresMetric = "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total"
)

// nftFamilyCounter reads the IPv4 sample of one of kube-proxy's nftables
// counters; a counter not yet incremented may be absent, which is 0.
func nftFamilyCounter(t *testing.T, name string) float64 {
	t.Helper()
	samples, err := lab.MetricSamples(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		labels, value, _ := strings.Cut(s, " ")
		if !strings.Contains(labels, `ip_family="IPv4"`) {
			continue
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		return f
	}
	return 0
}

// nftChains lists the chain names of a table listing, sorted.
func nftChains(listing string) []string {
	var chains []string
	for _, m := range regexp.MustCompile(`(?m)^\s*chain (\S+) \{`).FindAllStringSubmatch(listing, -1) {
		chains = append(chains, m[1])
	}
	slices.Sort(chains)
	return chains
}

// nftObjectNamed finds in a table listing the name of the object of kind
// ("chain", "set") whose name matches pattern, failing t if none or several
// do.
func nftObjectNamed(t *testing.T, listing, kind, pattern string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s*` + kind + ` (` + pattern + `) \{`)
	found := re.FindAllStringSubmatch(listing, -1)
	if len(found) != 1 {
		t.Fatalf("want one %s matching %s in kproxy's table, found %d:\n%s", kind, pattern, len(found), listing)
	}
	return found[0][1]
}

// errorEntries are kproxy's error log entries (klog's E prefix, with the
// indented lines of a multi-line value that follow) that contain every one
// of words.
// waitErrorEntry waits for kproxy to log an error entry holding every one
// of words and returns it: the failure counter may rise before the entry
// is written.
func waitErrorEntry(t *testing.T, l *e2eLab, words ...string) string {
	t.Helper()
	var entry string
	lab.Within(t, changeBound, "kproxy to log an error naming "+strings.Join(words, ", "), func() (bool, string) {
		lines := errorEntries(l.kproxy.Log(), words...)
		if len(lines) == 0 {
			return false, "not logged:\n" + l.kproxy.Log()
		}
		entry = lines[0]
		return true, ""
	})
	return entry
}

func errorEntries(log string, words ...string) []string {
	klogHeader := regexp.MustCompile(`^[IWEF]\d{4} `)
	var entries []string
	for _, line := range strings.Split(log, "\n") {
		if klogHeader.MatchString(line) || len(entries) == 0 {
			entries = append(entries, line)
			continue
		}
		entries[len(entries)-1] += "\n" + line
	}
	var out []string
	for _, e := range entries {
		if !strings.HasPrefix(e, "E") {
			continue
		}
		all := true
		for _, w := range words {
			all = all && strings.Contains(e, w)
		}
		if all {
			out = append(out, e)
		}
	}
	return out
}

// removeForeignChain removes a chain the case added to kproxy's table, if
// it is still there.
func removeForeignChain(node *lab.Host, chain string) {
	if _, err := node.Exec("nft", "list", "chain", "ip", nftTable, chain); err != nil {
		return
	}
	_, _ = node.Exec("nft", "flush", "chain", "ip", nftTable, chain)
	_, _ = node.Exec("nft", "delete", "chain", "ip", nftTable, chain)
}

// TestNFTablesTableRestored: someone else flushes or deletes kproxy's
// table; the next periodic sync writes it whole again, and traffic flows.
func TestNFTablesTableRestored(t *testing.T) {
	forModes(t, hasNFTablesRules, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m, "--nftables-sync-period="+nftResyncPeriod.String())
		if l == nil {
			return
		}
		askWeb := askHTTP(l.topo.Client, "http://"+webVIP+"/")
		askEcho := l.askUDPNewFlows(t, l.topo.Client, echoVIP+":53")
		l.wantBalanced(t, "TCP ClusterIP at first", askWeb)
		node := l.topo.Node
		chains := map[string][]string{}
		for _, family := range []string{"ip", "ip6"} {
			table, err := l.nftTable(family)
			if err != nil {
				t.Fatal(err)
			}
			chains[family] = nftChains(table)
			if len(chains[family]) == 0 {
				t.Fatalf("kproxy's %s table has no chain:\n%s", family, table)
			}
		}
		for _, tc := range []struct {
			family, verb string
		}{
			{"ip", "flush"}, {"ip", "delete"}, {"ip6", "flush"}, {"ip6", "delete"},
		} {
			t.Run(tc.verb+" "+tc.family, func(t *testing.T) {
				node.MustExec("nft", tc.verb, "table", tc.family, nftTable)
				broken := time.Now()
				lab.Within(t, 2*nftResyncPeriod+changeBound, "the next sync restoring the "+tc.family+" table", func() (bool, string) {
					l.alive(t)
					table, err := l.nftTable(tc.family)
					if err != nil {
						return false, err.Error()
					}
					// A flushed table keeps its chains and loses their
					// rules: wait for a rule of the service too.
					if got := nftChains(table); !slices.Equal(got, chains[tc.family]) || (tc.family == "ip" && !mentionsAddress(table, webVIP)) {
						return false, table
					}
					// Map elements (goto service-...) outlive a flush; the
					// base chains' jumps do not.
					if !regexp.MustCompile(`(?m)^\s+jump services$`).MatchString(table) {
						return false, table
					}
					if tc.family != "ip" {
						return true, ""
					}
					seen, err := spreadOver(3, askWeb)
					return err == nil && len(seen) == 3, fmt.Sprint(seen, err)
				})
				t.Logf("the %s table was whole again %v after nft %s table", tc.family, time.Since(broken).Round(time.Millisecond), tc.verb)
				l.wantBalanced(t, "TCP ClusterIP after the restore", askWeb)
				l.wantBalanced(t, "UDP ClusterIP after the restore", askEcho)
			})
		}
	})
}

// TestNFTablesFailedTransaction: a transaction the kernel refuses changes
// nothing, is logged naming what failed and counted with kube-proxy's
// metric; the other services keep working, and once the cause goes the
// next sync lands.
func TestNFTablesFailedTransaction(t *testing.T) {
	forModes(t, hasNFTablesRules, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m, "--nftables-sync-period="+nftResyncPeriod.String())
		if l == nil {
			return
		}
		askWeb := askHTTP(l.topo.Client, "http://"+webVIP+"/")
		askEcho := l.askUDPNewFlows(t, l.topo.Client, echoVIP+":53")
		node := l.topo.Node
		l.wantBalanced(t, "TCP ClusterIP at first", askWeb)
		backend3 := l.backends[2]

		t.Run("a stale affinity set in use elsewhere fails the sync and keeps the rules", func(t *testing.T) {
			// kube-proxy deletes the affinity set of a ClientIP-affinity
			// endpoint that went away in the sync's own transaction. Another
			// program's rule, in a chain of its own in kproxy's table, that
			// looks the set up makes the kernel refuse the deletion (EBUSY),
			// and with it the whole transaction.
			table, err := l.nftTable("ip")
			if err != nil {
				t.Fatal(err)
			}
			set := nftObjectNamed(t, table, "set", `affinity-\S*-default/sticky/tcp/http__`+regexp.QuoteMeta(backend3)+`/\d+`)
			nftScript(t, node, fmt.Sprintf("add chain ip %[1]s audit-sticky\nadd rule ip %[1]s audit-sticky ip saddr @%[2]s counter\n", nftTable, set))
			// Should the case stop half-way, the next one starts without it.
			t.Cleanup(func() { removeForeignChain(node, "audit-sticky") })
			before := l.programmedState(t)
			failures := nftFamilyCounter(t, nftSyncFailuresMetric)

			// One change: backend-3 leaves web and sticky.
			l.write(t, coreServices{backends: l.backends, webBackends: l.backendsExcept("backend-3"),
				stickyBackends: l.backendsExcept("backend-3"), stickyTimeout: 60}.render())
			lab.Within(t, changeBound, "a failed nftables sync to be counted", func() (bool, string) {
				l.alive(t)
				v := nftFamilyCounter(t, nftSyncFailuresMetric)
				return v > failures, fmt.Sprint(v)
			})
			t.Logf("logged: %s", waitErrorEntry(t, l, "delete set ip "+nftTable+" "+set, "busy"))
			// Failed syncs are retried (in full) every sync period: watch a
			// few of them.
			time.Sleep(2 * nftResyncPeriod)
			if after := l.programmedState(t); after != before {
				t.Errorf("kproxy's tables changed although its transactions failed.\nbefore:\n%s\nafter:\n%s", before, after)
			}
			// backend-3 was removed by the change that could not be written.
			l.wantBalanced(t, "TCP ClusterIP while syncs fail (the previous rules)", askWeb)
			l.wantBalanced(t, "UDP ClusterIP while syncs fail", askEcho)
			if retried := nftFamilyCounter(t, nftSyncFailuresMetric); retried < failures+2 {
				t.Errorf("%s = %v after two sync periods of failures, want the retries counted too (at least %v)", nftSyncFailuresMetric, retried, failures+2)
			}

			// The other program removes its rule: the next sync lands.
			nftScript(t, node, fmt.Sprintf("flush chain ip %[1]s audit-sticky\ndelete chain ip %[1]s audit-sticky\n", nftTable))
			lab.Within(t, 2*nftResyncPeriod+changeBound, "backend-3 leaving the rotation once the set is free", func() (bool, string) {
				l.alive(t)
				seen, err := spreadOver(2, askWeb)
				return err == nil && len(seen) == 2 && seen["backend-3"] == 0, fmt.Sprint(seen, err)
			})
			settled := nftFamilyCounter(t, nftSyncFailuresMetric)
			time.Sleep(2 * nftResyncPeriod)
			if v := nftFamilyCounter(t, nftSyncFailuresMetric); v != settled {
				t.Errorf("%s rose from %v to %v after the cause went: syncs still fail:\n%s", nftSyncFailuresMetric, settled, v, l.kproxy.Log())
			}
			table, err = l.nftTable("ip")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(table, set) {
				t.Errorf("the stale affinity set %s is still there after the sync that removed its endpoint:\n%s", set, table)
			}
		})

		t.Run("a stale service chain in use elsewhere is deleted once free", func(t *testing.T) {
			// A deleted service's chain is flushed in the sync's transaction
			// and deleted a second or more later (as kube-proxy does, for
			// kernels that free a chain a map element referred to only a
			// while later). Another program's rule jumping to it makes that
			// deletion fail (EBUSY): the service is gone all the same, the
			// failure is logged and counted as a cleanup failure, other
			// changes still land, and the chain goes once it is free.
			table, err := l.nftTable("ip")
			if err != nil {
				t.Fatal(err)
			}
			chain := nftObjectNamed(t, table, "chain", `service-\S*-default/gone/tcp/http`)
			nftScript(t, node, fmt.Sprintf("add chain ip %[1]s audit-gone\nadd rule ip %[1]s audit-gone jump %[2]s\n", nftTable, chain))
			t.Cleanup(func() { removeForeignChain(node, "audit-gone") })
			cleanupFailures := nftFamilyCounter(t, nftCleanupFailuresMetric)

			l.write(t, coreServices{backends: l.backends, webBackends: l.backendsExcept("backend-3"),
				stickyBackends: l.backendsExcept("backend-3"), stickyTimeout: 60, withoutGone: true}.render())
			lab.Within(t, changeBound, "the deleted service's rules going away", func() (bool, string) {
				programmed, state := l.programs(t, goneVIP)
				return !programmed, state
			})
			wantNotServed(t, l.topo.Client, "the deleted service", goneVIP+":80")
			lab.Within(t, 2*nftResyncPeriod+changeBound, "the failed deletion of the stale chain to be counted", func() (bool, string) {
				l.alive(t)
				v := nftFamilyCounter(t, nftCleanupFailuresMetric)
				return v > cleanupFailures, fmt.Sprint(v)
			})
			t.Logf("logged: %s", waitErrorEntry(t, l, "delete chain ip "+nftTable+" "+chain, "busy"))
			l.wantBalanced(t, "UDP ClusterIP while the stale chain cannot go", askEcho)
			if seen, err := spreadOver(2, askWeb); err != nil || len(seen) != 2 || seen["backend-3"] != 0 {
				t.Errorf("web reached %v (%v) while the stale chain cannot go, want backend-1 and backend-2", seen, err)
			}
			// A chain someone else holds must not hold up the other
			// services' changes (kube-proxy deletes stale chains in a
			// transaction of their own).
			l.write(t, coreServices{backends: l.backends, stickyTimeout: 60, withoutGone: true}.render())
			lab.Within(t, 2*nftResyncPeriod+changeBound, "backend-3 rejoining web while the stale chain cannot go", func() (bool, string) {
				l.alive(t)
				seen, err := spreadOver(3, askWeb)
				return err == nil && len(seen) == 3, fmt.Sprint(seen, err)
			})

			nftScript(t, node, fmt.Sprintf("flush chain ip %[1]s audit-gone\ndelete chain ip %[1]s audit-gone\n", nftTable))
			lab.Within(t, 2*nftResyncPeriod+changeBound, "the stale chain going once free", func() (bool, string) {
				table, err := l.nftTable("ip")
				if err != nil {
					return false, err.Error()
				}
				return !strings.Contains(table, chain), table
			})
			settled := nftFamilyCounter(t, nftCleanupFailuresMetric)
			time.Sleep(2 * nftResyncPeriod)
			if v := nftFamilyCounter(t, nftCleanupFailuresMetric); v != settled {
				t.Errorf("%s rose from %v to %v after the chain was deleted", nftCleanupFailuresMetric, settled, v)
			}
		})
	})
}

// TestNFTablesCleanup: --cleanup after the nftables mode removes kproxy's
// table in both families and nothing else (an operator's own nftables
// tables and iptables rules stay), also on a node without the nft tool,
// over netlink.
func TestNFTablesCleanup(t *testing.T) {
	forModes(t, hasNFTablesRules, func(t *testing.T, m proxyMode) {
		for _, tc := range []struct {
			name string
			// path is --cleanup's PATH; nil: the node's own.
			path func(t *testing.T) string
		}{
			{name: "with nft"},
			{name: "without nft", path: func(t *testing.T) string { return lab.PathWithout(t, "nft") }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				l := newLab(t, m, renderCore)
				if l == nil {
					return
				}
				node := l.topo.Node
				addOperatorRules(t, node)
				before := l.allRules(t)

				l.runKproxy(t, nil)
				l.wantBalanced(t, "TCP ClusterIP", askHTTP(l.topo.Client, "http://"+webVIP+"/"))
				for _, family := range []string{"ip", "ip6"} {
					if _, err := l.nftTable(family); err != nil {
						t.Fatalf("kproxy did not write its %s table: %v", family, err)
					}
				}
				if err := l.kproxy.Stop(); err != nil {
					t.Logf("stopping kproxy: %v", err)
				}
				var out string
				var err error
				if tc.path == nil {
					out, err = node.Exec(l.bin, "--cleanup")
				} else {
					out, err = node.Exec("env", "PATH="+tc.path(t), l.bin, "--cleanup")
				}
				if err != nil {
					t.Fatalf("kproxy --cleanup (%s): %v\n%s", tc.name, err, out)
				}
				t.Logf("kproxy --cleanup (%s): %s", tc.name, lastLine(out))
				if after := l.allRules(t); after != before {
					t.Fatalf("--cleanup did not leave the node as it was before kproxy ran.\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	})
}

// TestNFTablesNoEndpointsRefused: a service without endpoints is refused
// at once (a TCP reset, an ICMP port unreachable) rather than left to time
// out, through every address it has, in both families, from a client and
// from the node itself. kube-proxy's iptables rules reject the same way.
func TestNFTablesNoEndpointsRefused(t *testing.T) {
	const (
		vip4, vip6  = "198.18.0.98", "fd00:18::98"
		external4   = "198.18.5.98"
		nodePort    = 30098
		udpNodePort = 30099
	)
	forModes(t, func(m proxyMode) bool { return m.nftablesRules || m.iptablesRules }, func(t *testing.T, m proxyMode) {
		l := newLabOn(t, m, lab.TopologyOptions{Backends: 3, DualStack: true}, func(*e2eLab) string {
			return docs(nodeDoc, serviceDoc("void", fmt.Sprintf("type: NodePort, ipFamilyPolicy: RequireDualStack, ipFamilies: [IPv4, IPv6], "+
				"clusterIP: %[1]s, clusterIPs: [%[1]s, %[2]s], externalIPs: [%[3]s], "+
				"ports: [{name: http, port: 80, targetPort: 8080, nodePort: %[4]d}, {name: dns, port: 53, protocol: UDP, targetPort: 9000, nodePort: %[5]d}]",
				vip4, vip6, external4, nodePort, udpNodePort), ""),
				familySliceDoc("IPv4", "void-4", "void", "{name: http, port: 8080, protocol: TCP}, {name: dns, port: 9000, protocol: UDP}"),
				familySliceDoc("IPv6", "void-6", "void", "{name: http, port: 8080, protocol: TCP}, {name: dns, port: 9000, protocol: UDP}"))
		})
		if l == nil {
			return
		}
		// The case draws a dozen ICMP errors from the node to one client
		// in a row; the kernel's per-destination limit (a burst of six,
		// then one a second) would drop some and turn refusals into
		// timeouts. The rules refuse; the limit is the node's business.
		for _, sysctl := range []string{"/proc/sys/net/ipv4/icmp_ratelimit", "/proc/sys/net/ipv6/icmp/ratelimit"} {
			if err := os.WriteFile(sysctl, []byte("0"), 0o644); err != nil {
				t.Fatalf("lifting the node's ICMP rate limit: %v", err)
			}
		}
		l.runKproxy(t, nil)
		client, node := l.topo.Client, l.topo.Node
		for _, tc := range []struct {
			from   *lab.Host
			host   string
			tcp    int
			udp    int
			what   string
			remote bool
		}{
			{client, vip4, 80, 53, "IPv4 cluster IP", true},
			{client, vip6, 80, 53, "IPv6 cluster IP", true},
			{client, external4, 80, 53, "external IP", true},
			{client, nodeIP, nodePort, udpNodePort, "NodePort", true},
			{node, vip4, 80, 53, "IPv4 cluster IP", false},
			{node, vip6, 80, 53, "IPv6 cluster IP", false},
		} {
			what := fmt.Sprintf("%s without endpoints from %s", tc.what, tc.from.Name)
			start := time.Now()
			dialRefused(t, tc.from, "TCP to the "+what, net.JoinHostPort(tc.host, strconv.Itoa(tc.tcp)))
			tcpTook := time.Since(start)
			start = time.Now()
			// A datagram the node itself sends that a reject rule stops on
			// its way out fails its send with EPERM; one from elsewhere
			// comes back as an ICMP port unreachable (ECONNREFUSED).
			answer, err := lab.UDPAsk(tc.from, net.JoinHostPort(tc.host, strconv.Itoa(tc.udp)), "ping")
			if !errors.Is(err, syscall.ECONNREFUSED) && (tc.remote || !errors.Is(err, syscall.EPERM)) {
				t.Errorf("UDP to the %s: answer %q, error %v; want it refused", what, answer, err)
			}
			// IPv6 TCP is refused on the SYN's first retransmission, a
			// second on, in the iptables mode too: the kernel takes the
			// first ICMPv6 error as a soft one.
			t.Logf("%s: TCP refused after %v, UDP after %v (%v)", what, tcpTook.Round(time.Microsecond), time.Since(start).Round(time.Microsecond), err)
		}
	})
}

// TestNFTablesSwitchModes: kproxy in the nftables mode on a node the
// iptables mode ran on removes the iptables mode's rules (leaving the
// operator's), and the iptables mode after it removes kproxy's nftables
// tables (leaving the operator's); each serves.
func TestNFTablesSwitchModes(t *testing.T) {
	forModes(t, hasNFTablesRules, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		node := l.topo.Node
		addOperatorRules(t, node)
		iptablesBefore, nftBefore := l.iptablesDump(t), l.nftTablesBesidesIPTables(t)
		iptablesMode := proxyMode{name: "iptables", keepsClientAddress: true, iptablesRules: true}
		askWeb := askHTTP(l.topo.Client, "http://"+webVIP+"/")

		for i, next := range []proxyMode{iptablesMode, m, iptablesMode} {
			l.mode = next
			l.runKproxy(t, nil)
			l.wantBalanced(t, "TCP ClusterIP in the "+next.name+" mode", askWeb)
			switch {
			case next.nftablesRules:
				if after := l.iptablesDump(t); after != iptablesBefore {
					t.Errorf("the iptables mode's rules outlived the switch to the nftables mode.\nbefore the iptables mode:\n%s\nnow:\n%s", iptablesBefore, after)
				}
			case i > 0:
				if after := l.nftTablesBesidesIPTables(t); after != nftBefore {
					t.Errorf("the nftables mode's tables outlived the switch to the iptables mode.\nbefore the nftables mode:\n%s\nnow:\n%s", nftBefore, after)
				}
			}
			if err := l.kproxy.Stop(); err != nil {
				t.Logf("stopping kproxy: %v", err)
			}
		}
	})
}

// TestNFTablesMapDamageRepaired: someone else empties one of kproxy's maps
// or sets, or deletes single elements, which leaves every chain and rule
// (the canary) in place. The next periodic sync, with no service change,
// notices and rewrites the table: traffic comes back within a couple of
// sync periods, and a later change (which deletes a repaired element)
// lands without a failed transaction.
func TestNFTablesMapDamageRepaired(t *testing.T) {
	forModes(t, hasNFTablesRules, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m, "--nftables-sync-period="+nftResyncPeriod.String())
		if l == nil {
			return
		}
		askWeb := askHTTP(l.topo.Client, "http://"+webVIP+"/")
		askNodePort := askHTTP(l.topo.Client, fmt.Sprintf("http://%s:%d/", nodeIP, webNodePort))
		askGone := askHTTP(l.topo.Client, "http://"+goneVIP+"/")
		l.wantBalanced(t, "TCP ClusterIP at first", askWeb)
		l.wantBalanced(t, "NodePort at first", askNodePort)
		node := l.topo.Node
		failures := nftFamilyCounter(t, nftSyncFailuresMetric)
		for _, tc := range []struct {
			name   string
			damage []string // nft arguments
			ask    func() (string, error)
		}{
			{"flush map service-ips", []string{"flush", "map", "ip", nftTable, "service-ips"}, askWeb},
			{"flush map service-nodeports", []string{"flush", "map", "ip", nftTable, "service-nodeports"}, askNodePort},
			{"delete web's service-ips element", []string{"delete", "element", "ip", nftTable, "service-ips",
				"{ " + webVIP + " . tcp . 80 }"}, askWeb},
			{"delete gone's cluster-ips element", []string{"delete", "element", "ip", nftTable, "cluster-ips",
				"{ " + goneVIP + " }"}, askGone},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before, err := l.nftTable("ip")
				if err != nil {
					t.Fatal(err)
				}
				node.MustExec("nft", tc.damage...)
				broken := time.Now()
				if after, _ := l.nftTable("ip"); sameTokens(after, before) {
					t.Fatalf("nft %s changed nothing", strings.Join(tc.damage, " "))
				}
				lab.Within(t, 2*nftResyncPeriod+changeBound, "the next sync repairing the table", func() (bool, string) {
					l.alive(t)
					table, err := l.nftTable("ip")
					if err != nil {
						return false, err.Error()
					}
					if !sameTokens(table, before) {
						return false, table
					}
					seen, err := spreadOver(3, tc.ask)
					return err == nil && len(seen) == 3, fmt.Sprint(seen, err)
				})
				t.Logf("traffic and table whole again %v after nft %s", time.Since(broken).Round(time.Millisecond), strings.Join(tc.damage, " "))
			})
		}
		// gone's element was deleted and restored behind kproxy's back;
		// removing gone deletes it again, which must land.
		l.write(t, coreServices{backends: l.backends, stickyTimeout: 60, withoutGone: true}.render())
		lab.Within(t, changeBound, "the deleted service's rules going away", func() (bool, string) {
			l.alive(t)
			programmed, state := l.programs(t, goneVIP)
			return !programmed, state
		})
		wantNotServed(t, l.topo.Client, "the deleted service", goneVIP+":80")
		l.wantBalanced(t, "TCP ClusterIP after the repairs", askWeb)
		if v := nftFamilyCounter(t, nftSyncFailuresMetric); v != failures {
			t.Errorf("%s rose from %v to %v: a repair or the change after it failed:\n%s", nftSyncFailuresMetric, failures, v, l.kproxy.Log())
		}
	})
}

// sameTokens compares two table listings as multisets of words: the
// kernel lists a set's elements in its hash order, which a rewrite may
// change.
func sameTokens(a, b string) bool {
	split := func(s string) []string {
		f := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == ',' })
		slices.Sort(f)
		return f
	}
	return slices.Equal(split(a), split(b))
}

// TestNFTablesFromConfigFile: `mode: nftables` and the nftables section of
// a KubeProxyConfiguration (--config), as kube-proxy reads them, with no
// mode flag: the mode runs with the file's sync period and masquerade bit.
func TestNFTablesFromConfigFile(t *testing.T) {
	forModes(t, hasNFTablesRules, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, renderCore)
		if l == nil {
			return
		}
		config := filepath.Join(t.TempDir(), "kube-proxy.yaml")
		const content = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
nftables: {syncPeriod: 7s, minSyncPeriod: 0s, masqueradeBit: 15}
conntrack: {maxPerCore: 0}
`
		if err := os.WriteFile(config, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		// The mode comes from the file alone; as with kube-proxy, the
		// setting flags runKproxy adds (--conntrack-max-per-core=0, ...)
		// are ignored next to --config, so the file says them.
		l.mode = proxyMode{name: m.name, auto: true, keepsClientAddress: m.keepsClientAddress, nftablesRules: true}
		l.runKproxy(t, nil, "--config="+config)
		log := l.kproxy.Log()
		for _, want := range []string{`"Using proxy mode"`, `mode="nftables"`, `syncPeriod="7s"`} {
			if !strings.Contains(log, want) {
				t.Errorf("kproxy's log lacks %s:\n%s", want, log)
			}
		}
		l.wantBalanced(t, "TCP ClusterIP", askHTTP(l.topo.Client, "http://"+webVIP+"/"))
		url := fmt.Sprintf("http://%s:%d/", nodeIP, webNodePort)
		l.wantBalanced(t, url+" (masqueraded through the file's mark)", askHTTP(l.topo.Client, url))
		table, err := l.nftTable("ip")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(table, "0x00008000") || strings.Contains(table, "0x00004000") {
			t.Errorf("masqueradeBit: 15 wants mark 0x00008000 (and not the default bit 14's 0x00004000) in the table:\n%s", table)
		}

		// As kube-proxy, kproxy exits once the file changes, for whatever
		// restarts it to apply the new configuration whole; its rules
		// stay meanwhile.
		if err := os.WriteFile(config, []byte(strings.Replace(content, "7s", "8s", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.kproxy.Exited():
		case <-time.After(10 * time.Second):
			t.Fatal("kproxy still runs 10 s after its --config file changed")
		}
		if err := l.kproxy.Err(); err == nil || !strings.Contains(l.kproxy.Log(), "configuration file was updated") {
			t.Errorf("kproxy exited (%v) without saying its configuration file was updated:\n%s", err, lastLines(l.kproxy.Log(), 10))
		}
		l.wantBalanced(t, "TCP ClusterIP after kproxy exited", askHTTP(l.topo.Client, "http://"+webVIP+"/"))
	})
}
