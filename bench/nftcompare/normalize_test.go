package nftcompare

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// A listing as nft 1.0.6 prints kube-proxy's table (cut down): chains in
// creation order, elements wrapped over lines in hash order.
const listingA = `table ip kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips {
		type ipv4_addr
		comment "Active ClusterIPs"
		elements = { 198.18.0.1, 198.18.1.10,
			     198.18.1.11 }
	}

	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = { 198.18.1.10 . tcp . 80 : goto service-AAAA-default/web/tcp/http,
			     198.18.1.11 . tcp . 80 : goto service-BBBB-default/single/tcp/http }
	}

	set affinity-CCCC-default/sticky/tcp/https__198.19.2.19/8443 {
		type ipv4_addr
		flags dynamic,timeout
		timeout 10m
		elements = { 198.19.0.2 expires 9m58s120ms }
	}

	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
		ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
	}

	chain service-AAAA-default/web/tcp/http {
		meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 198.19.2.11 . 8080, 1 : 198.19.2.12 . 8080 }
	}

	chain service-BBBB-default/single/tcp/http {
		counter packets 12 bytes 720 meta l4proto tcp dnat ip to 198.19.2.14 . 8080
	}
}
`

// The same ruleset created in another order, as a second run lists it.
const listingB = `table ip kube-proxy {
	comment "rules for kube-proxy"
	chain service-BBBB-default/single/tcp/http {
		counter packets 0 bytes 0 meta l4proto tcp dnat ip to 198.19.2.14 . 8080
	}

	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
		ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
	}

	set affinity-CCCC-default/sticky/tcp/https__198.19.2.19/8443 {
		type ipv4_addr
		flags dynamic,timeout
		timeout 10m
	}

	chain service-AAAA-default/web/tcp/http {
		meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 198.19.2.11 . 8080, 1 : 198.19.2.12 . 8080 }
	}

	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = { 198.18.1.11 . tcp . 80 : goto service-BBBB-default/single/tcp/http, 198.18.1.10 . tcp . 80 : goto service-AAAA-default/web/tcp/http }
	}

	set cluster-ips {
		type ipv4_addr
		comment "Active ClusterIPs"
		elements = { 198.18.1.11,
			     198.18.1.10,
			     198.18.0.1 }
	}
}
`

func TestNormalizeAndCompare(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a, b   string
		equal  bool
		inDiff []string // lines the diff must show
	}{
		{name: "same listing", a: listingA, b: listingA, equal: true},
		{name: "other creation and element order, affinity entries, counters", a: listingA, b: listingB, equal: true},
		{name: "an empty chain nothing names (a removed service's, not deleted yet)", a: listingA, equal: true,
			b: strings.Replace(listingA, "\tchain services {", "\tchain service-DDDD-default/gone/tcp/http {\n\t}\n\n\tchain services {", 1)},
		{name: "an empty chain something names", a: listingA, equal: false,
			b: strings.Replace(strings.Replace(listingA, "\tchain services {", "\tchain service-DDDD-default/gone/tcp/http {\n\t}\n\n\tchain services {", 1),
				"198.18.1.11 . tcp . 80 : goto service-BBBB-default/single/tcp/http", "198.18.1.11 . tcp . 80 : goto service-DDDD-default/gone/tcp/http", 1),
			inDiff: []string{"+\tchain service-DDDD-default/gone/tcp/http {"}},
		{name: "rule order inside a chain matters", a: listingA, equal: false,
			b: strings.Replace(listingA, `		ip daddr . meta l4proto . th dport vmap @service-ips
		ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports`, `		ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
		ip daddr . meta l4proto . th dport vmap @service-ips`, 1),
			inDiff: []string{"-\t\tip daddr . meta l4proto . th dport vmap @service-ips"}},
		{name: "a changed endpoint", a: listingA, equal: false,
			b:      strings.Replace(listingA, "1 : 198.19.2.12 . 8080", "1 : 198.19.2.13 . 8080", 1),
			inDiff: []string{"+\t\tmeta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 198.19.2.11 . 8080, 1 : 198.19.2.13 . 8080 }"}},
		{name: "a missing set element", a: listingA, equal: false,
			b:      strings.Replace(listingA, "198.18.0.1, 198.18.1.10,", "198.18.0.1,", 1),
			inDiff: []string{"-\t\t\t198.18.1.10,"}},
		{name: "an extra chain", a: listingA, equal: false,
			b:      strings.Replace(listingA, "\tchain services {", "\tchain extra {\n\t\tjump services\n\t}\n\n\tchain services {", 1),
			inDiff: []string{"+\tchain extra {", "+\t\tjump services"}},
		{name: "a changed comment", a: listingA, equal: false,
			b:      strings.Replace(listingA, `comment "Active ClusterIPs"`, `comment "active ClusterIPs"`, 1),
			inDiff: []string{`-		comment "Active ClusterIPs"`, `+		comment "active ClusterIPs"`}},
		{name: "a changed affinity timeout", a: listingA, equal: false,
			b:      strings.Replace(listingA, "timeout 10m", "timeout 3h", 1),
			inDiff: []string{"-\t\ttimeout 10m", "+\t\ttimeout 3h"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Normalize(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Normalize(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			d := UnifiedDiff("a", "b", a, b)
			if (d == "") != tc.equal {
				t.Fatalf("equal = %v, want %v; diff:\n%s\nnormalised a:\n%s", d == "", tc.equal, d, a)
			}
			for _, l := range tc.inDiff {
				if !strings.Contains(d, "\n"+l+"\n") {
					t.Errorf("the diff lacks line %q:\n%s", l, d)
				}
			}
		})
	}
}

func TestNormalizeOutput(t *testing.T) {
	got, err := Normalize(listingB)
	if err != nil {
		t.Fatal(err)
	}
	want := `table ip kube-proxy {
	comment "rules for kube-proxy"

	chain service-AAAA-default/web/tcp/http {
		meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 198.19.2.11 . 8080, 1 : 198.19.2.12 . 8080 }
	}

	chain service-BBBB-default/single/tcp/http {
		counter packets 0 bytes 0 meta l4proto tcp dnat ip to 198.19.2.14 . 8080
	}

	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
		ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
	}

	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = {
			198.18.1.10 . tcp . 80 : goto service-AAAA-default/web/tcp/http,
			198.18.1.11 . tcp . 80 : goto service-BBBB-default/single/tcp/http,
		}
	}

	set affinity-CCCC-default/sticky/tcp/https__198.19.2.19/8443 {
		type ipv4_addr
		flags dynamic,timeout
		timeout 10m
	}

	set cluster-ips {
		type ipv4_addr
		comment "Active ClusterIPs"
		elements = {
			198.18.0.1,
			198.18.1.10,
			198.18.1.11,
		}
	}
}
`
	if got != want {
		t.Errorf("Normalize:\n%s", UnifiedDiff("want", "got", want, got))
	}
}

func TestNormalizeRejectsBrokenListings(t *testing.T) {
	for _, l := range []string{
		"table ip kube-proxy {\n\tchain a {\n",
		"table ip kube-proxy {\n}\n}\n",
		"table ip kube-proxy {\n\tset s {\n\t\telements = { 1.2.3.4,\n",
	} {
		if got, err := Normalize(l); err == nil {
			t.Errorf("Normalize(%q) = %q, want an error", l, got)
		}
	}
}

func TestUnifiedDiff(t *testing.T) {
	for _, tc := range []struct {
		name, a, b, want string
	}{
		{"equal", "x\ny\n", "x\ny\n", ""},
		{"one changed line in context", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nV\n6\n7\n8\n9\n",
			"--- a\n+++ b\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+V\n 6\n 7\n 8\n"},
		{"everything removed", "x\ny\n", "", "--- a\n+++ b\n@@ -1,2 +0,0 @@\n-x\n-y\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "A\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\nB\n",
			"--- a\n+++ b\n@@ -1,4 +1,4 @@\n-1\n+A\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+B\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := UnifiedDiff("a", "b", tc.a, tc.b); got != tc.want {
				t.Errorf("UnifiedDiff:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestUnexplained(t *testing.T) {
	known := []KnownDifference{{Scenario: "s", Family: "ip", Line: regexp.MustCompile(`^\+\s*extra`), Reason: "test"}}
	for _, tc := range []struct {
		name, scenario, family, a, b string
		want                         int
	}{
		{"explained", "s", "ip", "x\n", "x\nextra\n", 0},
		{"other family", "s", "ip6", "x\n", "x\nextra\n", 1},
		{"other scenario", "t", "ip", "x\n", "x\nextra\n", 1},
		{"removed, not added", "s", "ip", "x\nextra\n", "x\n", 1},
		{"unexplained too", "s", "ip", "x\n", "y\nextra\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unexplained(tc.scenario, tc.family, tc.a, tc.b, known); len(got) != tc.want {
				t.Errorf("Unexplained = %q, want %d lines", got, tc.want)
			}
		})
	}
}

func TestScenarioFiles(t *testing.T) {
	scenarios, err := LoadScenarios("testdata")
	if err != nil {
		t.Fatal(err)
	}
	clusterIPs := map[string]string{}
	nodePorts := map[int32]string{}
	for _, sc := range scenarios {
		if len(sc.Services) == 0 {
			t.Errorf("%s: no services", sc.Name)
		}
		names := map[string]bool{}
		for _, s := range sc.Services {
			names[s.Namespace+"/"+s.Name] = true
			// Scenarios share one API server one after the other: distinct
			// addresses and ports keep a slow release from failing the next.
			for _, ip := range s.Spec.ClusterIPs {
				if prev, dup := clusterIPs[ip]; dup && ip != "None" {
					t.Errorf("%s: cluster IP %s is also used by %s", sc.Name, ip, prev)
				}
				clusterIPs[ip] = sc.Name
			}
			for _, p := range s.Spec.Ports {
				if prev, dup := nodePorts[p.NodePort]; dup && p.NodePort != 0 {
					t.Errorf("%s: node port %d is also used by %s", sc.Name, p.NodePort, prev)
				}
				nodePorts[p.NodePort] = sc.Name
			}
		}
		for _, es := range sc.EndpointSlices {
			if svc := es.Labels["kubernetes.io/service-name"]; !names[es.Namespace+"/"+svc] {
				t.Errorf("%s: endpoint slice %s belongs to no service of the scenario (%q)", sc.Name, es.Name, svc)
			}
		}
	}
}

func TestReport(t *testing.T) {
	results := []Result{
		{Scenario: "a", Family: "ip"},
		{Scenario: "a", Family: "ip6", Diff: "--- x\n+++ y\n@@ -1 +1 @@\n-p\n+q\n", Unexplained: 2},
		{Scenario: "b", Family: "ip", Diff: "--- x\n+++ y\n@@ -1 +1 @@\n-p\n+q\n"},
		{Scenario: "b", Family: "ip6", Problem: "kproxy: exited", Diff: "--- x\n+++ y\n@@ -1,1 +0,0 @@\n-p\n"},
	}
	got := Report(results, time.Date(2026, 11, 27, 11, 0, 0, 0, time.UTC), "")
	for _, want := range []string{
		"2026-11-27 11:00:00 UTC nftcompare: 2 scenario×family identical (or known differences only), 1 differ, 1 not compared\n",
		"## a, ip: identical\n",
		"## a, ip6: 2 unexplained changed lines\n\n```diff\n--- x\n",
		"## b, ip: known differences only\n",
		"## b, ip6: not compared\n\n```\nkproxy: exited\n```\n\nkube-proxy's table, against what kproxy left:\n\n```diff\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
}
