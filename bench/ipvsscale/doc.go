// Package ipvsscale measures the IPVS mode's sync at the IPVS issue's sizes:
// 1,000 and 10,000 TCP ClusterIP service ports of 10 endpoints each. A sync
// has two halves, measured apart because they run in different places:
//
//   - the desired-state computation (redirect/modes/ipvs/desired), pure Go, timed
//     on the host (MeasureBuild);
//   - the reconciler (redirect/modes/ipvs/reconcile) applying that state over
//     netlink, which needs IPVS and so runs in the user-mode-linux guest
//     kernel (bench/guest), whose syscalls are about 60× slower than the
//     host's: its times are upper bounds.
//
// BenchmarkGuestIPVSSync (guest only, one fresh network namespace per size)
// wraps the real handles (moby/ipvs, kube-ipvs0, ipsets over netlink) in
// counting decorators (Count) and measures the first full apply into an
// empty kernel, then reads the kernel back (ReadInventory) so a silent
// no-op cannot pass; then one-endpoint changes in a b.Loop (ns/op is one
// change's sync), checking the last one reached the kernel; then an
// incremental sync and a periodic full resync with nothing changed. It
// reports them with b.ReportMetric (s/full-sync, ops/full-sync,
// ms/one-change, ops/one-change, ops/no-change, s/full-resync,
// reads/full-resync, ensures/full-resync, writes/full-resync):
//
//	go build -o bin/guest-exec ./bench/guest/cmd/guest-exec
//	TMPDIR=/var/tmp go test -count=1 -exec $PWD/bin/guest-exec -run '^$' \
//	    -bench '^BenchmarkGuestIPVSSync' -benchtime=1x -timeout 30m ./bench/ipvsscale/
//
// BenchmarkIPVSScale (host only) makes the table with both halves: per size
// it times the desired-state build here, boots a guest running
// BenchmarkGuestIPVSSync for that size (this test binary is the guest's
// init, so no -exec), reads its result line back (ParseGuestOutput), then
// prints a Markdown table and writes it to $KPROXY_BENCH_TABLE when set
// (see Command).
//
// TestGuestIPVSScaleSmoke runs the same steps at 50 ports in the guest and
// checks the counts exactly; TestSyncStepsOnFakes runs those checks on the
// fake kernel (redirect/modes/ipvs/fakeipvs) on the host.
//
// Settings (environment, read in the guest too): KPROXY_IPVSSCALE_SIZES
// (default "1000,10000"), KPROXY_IPVSSCALE_CHANGES (change syncs the table
// averages, default 20) and KPROXY_IPVSSCALE_GUEST_MEM (default 512M).
package ipvsscale
