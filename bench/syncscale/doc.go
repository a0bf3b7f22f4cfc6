// Package syncscale holds the sync benchmark: kproxy
// against kube-proxy v1.36 (bench/tools/bin/kube-proxy), both in the same
// proxy mode, on the same real kube-apiserver, in the same
// network-namespace lab. A row is a proxy mode and a service count; the
// modes are the iptables mode on each iptables backend (iptables-nft,
// iptables-legacy) and the nftables mode.
//
// BenchmarkSyncScale runs every row in a fresh network namespace of its
// own, with a fresh API server holding N services (port 80, one
// EndpointSlice of 10 endpoints each). In each row kproxy runs first, then,
// after `kproxy --cleanup`, kube-proxy, and for each it measures
//
//   - the first full sync: from process start until the sync counter
//     (kubeproxy_sync_proxy_rules_duration_seconds_count) reaches 1, next to
//     the full-sync histogram's sum, plus the rule count and the size of the
//     rule dump (iptables-save's nat and filter tables; `nft list table ip
//     kube-proxy`), and the proxy's VmRSS and VmHWM and CPU time (its own
//     and its iptables-restore or nft children's) at that moment;
//   - one change: an endpoint added to one service, timed from the API update
//     until the kernel holds it: in the iptables modes `iptables -t nat -S
//     KUBE-SVC-…` shows the jump to its new endpoint chain (listed whenever
//     the nat table's version moves, see NATVersion); in the nftables mode
//     the service chain's rules and their anonymous numgen map, read over
//     netlink whenever nf_tables' generation moves, hold the endpoint's
//     address and port (see NFTWatch); next to the partial-sync histogram's
//     growth;
//   - network programming latency: a new Service and EndpointSlice whose
//     endpoint is a real server on a backend host, timed from the create
//     until a client host gets that server's answer through the ClusterIP
//     (the median of a few).
//
// Each proxy is stopped with its whole process group, and any iptables or
// nft process left in the row's namespace is killed, before the next one
// starts.
//
// In the iptables rows the backend is forced and checked in
// iptables-nft-save and iptables-legacy-save after every full sync: kproxy
// picks legacy where legacy already holds kube rules (the row marks the
// node like kubelet does, with a KUBE-IPTABLES-HINT chain), and kube-proxy
// runs whatever `iptables` its PATH finds (each row gives it a directory of
// the backend's tools). The nftables rows need no marker (the mode runs nft
// whichever backend iptables has); the table is checked to hold a service
// chain per service and both iptables backends no proxy rule.
//
// It prints a Markdown table (and writes it to $KPROXY_BENCH_TABLE when set).
// Each number is measured once per invocation; run it with -benchtime 1x and
// no test timeout, as rows take minutes (under a -timeout too short for the
// settings, such as `make bench`'s catch-all run, it skips, saying so):
//
//	sudo go test -run '^$' -bench SyncScale -benchtime 1x -timeout 0 ./bench/syncscale/
//
// Settings (environment): KPROXY_SYNCSCALE_SIZES (default "100,1000,5000";
// up to 30,000 for the full table), KPROXY_SYNCSCALE_MODES (default
// "iptables-nft,iptables-legacy,nftables"; KPROXY_SYNCSCALE_BACKENDS=nft,legacy,
// its older form, picks iptables modes), KPROXY_SYNCSCALE_PROXIES (default
// "kproxy,kube-proxy"; one of them checks one side alone),
// KPROXY_SYNCSCALE_KUBEPROXY_BUDGET (default 120s: a kube-proxy full sync
// still running then is reported as "> budget"), KPROXY_SYNCSCALE_KPROXY_BUDGET
// (default 600s), KPROXY_SYNCSCALE_MIN_SYNC_PERIOD (default 1s, kube-proxy's
// default, given to both as --iptables-min-sync-period, which kube-proxy
// v1.36's nftables mode takes too) and KPROXY_SYNCSCALE_NPL_REPEATS (default
// 5). For diagnostics only, never for a published table:
// KPROXY_SYNCSCALE_LOG_DIR keeps the proxies' logs (and the nftables rows'
// tables) and KPROXY_SYNCSCALE_KPROXY_FLAGS adds kproxy flags.
package syncscale
