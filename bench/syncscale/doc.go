// Package syncscale holds issue 4's iptables-mode sync benchmark: kproxy
// against kube-proxy v1.36 (bench/tools/bin/kube-proxy), both in
// --proxy-mode=iptables, on the same real kube-apiserver, in the same
// network-namespace lab, on both iptables backends.
//
// BenchmarkSyncScale runs one row per (backend, service count) in a fresh
// network namespace of its own, with a fresh API server holding N services
// (port 80, one EndpointSlice of 10 endpoints each). In each row kproxy runs
// first, then, after `kproxy --cleanup`, kube-proxy, and for each it measures
//
//   - the first full sync: from process start until the sync counter
//     (kubeproxy_sync_proxy_rules_duration_seconds_count) reaches 1, next to
//     the full-sync histogram's sum, plus the nat rule count and the size of
//     iptables-save's nat and filter tables;
//   - one change: an endpoint added to one service, timed from the API update
//     until `iptables -t nat -S KUBE-SVC-…` shows the jump to its new
//     endpoint chain (listed whenever the nat table's version moves, see
//     NATVersion), next to the partial-sync histogram's growth;
//   - network programming latency: a new Service and EndpointSlice whose
//     endpoint is a real server on a backend host, timed from the create
//     until a client host gets that server's answer through the ClusterIP
//     (the median of a few).
//
// The backend is forced per row and checked in iptables-nft-save and
// iptables-legacy-save after every full sync: kproxy picks legacy where
// legacy already holds kube rules (the row marks the node like kubelet does,
// with a KUBE-IPTABLES-HINT chain), and kube-proxy runs whatever `iptables`
// its PATH finds (each row gives it a directory of the backend's tools).
//
// It prints a Markdown table (and writes it to $KPROXY_BENCH_TABLE when set).
// Each number is measured once per invocation; run it with -benchtime 1x and
// no test timeout, as rows take minutes (under a -timeout too short for the
// settings, such as `make bench`'s catch-all run, it skips, saying so):
//
//	sudo go test -run '^$' -bench SyncScale -benchtime 1x -timeout 0 ./bench/syncscale/
//
// Settings (environment): KPROXY_SYNCSCALE_SIZES (default "100,1000,5000"),
// KPROXY_SYNCSCALE_BACKENDS (default "nft,legacy"),
// KPROXY_SYNCSCALE_KUBEPROXY_BUDGET (default 120s: a kube-proxy full sync
// still running then is reported as "> budget"), KPROXY_SYNCSCALE_KPROXY_BUDGET
// (default 600s), KPROXY_SYNCSCALE_MIN_SYNC_PERIOD (default 1s, kube-proxy's
// default, given to both) and KPROXY_SYNCSCALE_NPL_REPEATS (default 5).
package syncscale
