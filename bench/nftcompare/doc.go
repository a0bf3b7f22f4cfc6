// Package nftcompare checks that kproxy's nftables mode writes the same
// nftables state as kube-proxy v1.36.3's: an operator can swap one for the
// other and every chain, set and map keeps its name and content.
//
// TestSameNFTablesAsKubeProxy starts one lab API server (etcd and
// kube-apiserver from bench/tools, dual-stack service ranges 198.18.0.0/16
// and fd00:18::/64) inside a fresh network namespace, and for each scenario
// file of testdata/ in turn:
//
//   - creates the scenario's Node (status addresses, zone label, podCIDRs),
//     Services (with their load-balancer status) and EndpointSlices;
//   - starts kube-proxy twice and kproxy (built from this tree) once, each in
//     a named namespace of its own (`ip netns`, nftc-<pid>-<scenario>-<n>)
//     holding the scenario's host addresses and a relay to the API server,
//     all with --proxy-mode=nftables (or the scenario's --config file), the
//     same node name and the same flags;
//   - waits until each `nft list table ip kube-proxy` and `… ip6 kube-proxy`
//     holds every service of the scenario and has not changed for 3 s. A
//     kube-proxy whose first sync came before it knew the service ranges
//     (it then lacks its rule for unallocated ClusterIPs until its next full
//     sync, an hour later) is restarted;
//   - normalises the listings (Normalize: objects sorted by kind and name,
//     set and map elements sorted, dynamic affinity-set contents dropped,
//     counters zeroed, empty chains nothing names dropped: what depends on
//     creation order, traffic or sync timing, nothing else) and compares
//     them as text. The two kube-proxy runs must be identical (else the
//     normaliser misses something run-dependent), and kproxy's must be
//     identical to kube-proxy's except for the lines the test's
//     knownDifferences list explains, each with its reason. A failure prints
//     the unified diff, kube-proxy's side first;
//   - checks that both proxies listen on the services' health-check node
//     ports;
//   - where the scenario names control flags (masquerade-all.yaml), runs a
//     fourth kube-proxy with them and checks that its tables differ: a live
//     check that the comparison can fail;
//   - if the file has a `kind: Then` document, makes its changes (updates,
//     new objects, deletions) and compares again: partial syncs must end
//     where kube-proxy's do;
//   - stops the proxies, removes their namespaces and deletes the objects.
//
// Each scenario file is a header document (kind: Scenario: description,
// flags or config, node, hostAddresses) followed by plain Service and
// EndpointSlice documents; see testdata/clusterip.yaml. ClusterIPs and
// NodePorts are given explicitly and are distinct across files
// (TestScenarioFiles checks), so scenarios do not wait for each other's
// addresses to be released.
//
// Run it alone, as root (about 1¼ minutes on 2 cores: a few seconds to
// build kproxy on a warm cache, 5 s for the API server, 5 s per scenario and
// 10 s for one with changes):
//
//	sudo env KPROXY_TOOLS_BIN=/work/main/bench/tools/bin \
//	  go test -count=1 -v -run TestSameNFTablesAsKubeProxy ./bench/nftcompare/
//
// Environment: KPROXY_TOOLS_BIN names the directory with kube-apiserver,
// etcd and kube-proxy (default <repo>/bench/tools/bin, built by `make
// tools`); KPROXY_BINARY a kproxy binary to use instead of building one;
// KPROXY_NFTCOMPARE_ONLY a regexp of the scenarios to run (`^external$`);
// KPROXY_NFTCOMPARE_REPORT a file to write a markdown report to (a summary
// line with the time, then each scenario and family with its diff);
// KPROXY_NFTCOMPARE_DUMP a directory to write every normalised table to.
//
// The test skips under -short. The normaliser, the differ, the report and
// the scenario files have their own quick tests (TestNormalize*,
// TestUnifiedDiff, TestUnexplained, TestReport, TestScenarioFiles), which
// run anywhere.
package nftcompare
