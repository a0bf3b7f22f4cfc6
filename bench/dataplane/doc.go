// Package dataplane holds the data-plane benchmark: one lab
// (bench/lab: a client, the node, one backend) and seven ways from the client
// to the backend's servers, each on its own service VIP so they coexist:
//
//   - direct: the client addresses the backend itself (routed by the node);
//   - iptables DNAT: a hand-written nat PREROUTING DNAT rule, VIP → backend;
//   - kproxy userspace, REDIRECT portals: the real kproxy binary,
//     --proxy-mode=userspace --userspace-portals=redirect, fed a services
//     file;
//   - kproxy userspace, local portals: the same with
//     --userspace-portals=local on a VIP of its own: kproxy adds a local
//     route for the VIP (proto 107) and its relays listen on it; the
//     benchmark adds no rule for it; binaries without the flag get no
//     local-portal column;
//   - kproxy userspace, socket-lookup portals: the same with
//     --userspace-portals=sklookup on a VIP of its own: the VIP gets a local
//     route as above, and kproxy's BPF sk_lookup program hands its service
//     ports to one relay socket per protocol; binaries without the kind, or
//     kernels that cannot run the program, get no column. The three kproxys
//     take turns on the node (each would remove the other portal kinds'
//     rules or routes at start): one runs while its path is measured, none
//     while another path is;
//   - Go io.Copy relay: the naive Go proxy (accept, dial, two io.Copy
//     goroutines; a per-flow UDP relay), run as its own process behind a
//     REDIRECT rule of the kind kproxy writes;
//   - HAProxy (Debian package, mode tcp, option splice-auto) behind the same
//     kind of REDIRECT rule.
//
// Every path uses the same single backend (backend-1), for every row: the
// comparison is about what sits between client and server, not about
// balancing. BenchmarkDataPlane measures bulk TCP (iperf3, 1 and 8 streams),
// keep-alive and new-connection request rates with p50/p99 latency (wrk
// against nginx), UDP request/response rate (a Go client, 64-byte datagrams,
// 16 flows) and the proxy's RSS per idle proxied TCP connection, then prints
// a Markdown table with ratios against the DNAT path measured in the same
// run (and writes it to $KPROXY_BENCH_TABLE when set).
//
// Each number is measured once per benchmark invocation, whatever b.N is:
// run it with -benchtime 1x, as `make bench` should:
//
//	sudo go test -run '^$' -bench '^BenchmarkDataPlane$' -benchtime 1x ./bench/dataplane/
//
// Comparing variants of a relay (compare.go, extra.go): KPROXY_DATAPLANE_EXTRA
// adds proxy binaries as columns of their own (tcprelayspec builds one that
// serves the specs with lb/tcprelay alone, so two trees' relays can share a
// run), KPROXY_DATAPLANE_PATHS
// measures some paths only, and KPROXY_DATAPLANE_ROUNDS repeats every row with
// the paths in a rotated order, printing every round's values and ratios and
// putting medians in the table. The wrk and iperf3 rows also report each
// proxy's CPU time per request or per gigabyte (proxy-cpu-µs/req,
// proxy-cpu-ms/GB), which moves much less than rates when other work shares
// the machine.
//
// KPROXY_DATAPLANE_KPROXY_MODE=iptables or =nftables measures that kproxy
// mode (kernel NAT from kube-proxy's rules; no proxy process, so no RSS or
// proxy-CPU rows) against the hand-written DNAT rule, in a lab of its own.
//
// BenchmarkDataPlaneScale measures new-connection
// requests and new UDP flows per second through one service with 1 and
// 10,000 services programmed (KPROXY_DATAPLANE_SCALE), for kube-proxy-shaped
// DNAT rules, kproxy's iptables and nftables modes and the userspace mode
// with either portal kind, each (path, number of services) on a fresh node
// of its own; see scale.go.
//
//	sudo go test -run '^$' -bench '^BenchmarkDataPlaneScale$' -benchtime 1x ./bench/dataplane/
//
// This file's package also holds the Go io.Copy relay (relay.go) and the
// parsers and table renderer the benchmark uses.
package dataplane
