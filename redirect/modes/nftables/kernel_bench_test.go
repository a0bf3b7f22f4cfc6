package nftables

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// BenchmarkKernelOneChange runs, with the real nft in a fresh network
// namespace, a first full sync of 1,000 to 30,000 services of 10 endpoints
// (reported as full-sync-s), then partial syncs of one endpoint change
// (the benchmark's ns/op, canary included), then the sync adding one new
// service (new-service-s). Same-run references: the
// netlink canary every sync runs (canary-s) against `nft list chain` of the
// same chain (nft-list-chain-s), the netlink listing of names a full sync
// of unknown state runs (names-s), and `nft -f` of a transaction holding
// only one element add and delete (nft-min-s): the least any change costs
// through the nft tool, which loads every chain and set of the namespace.
func BenchmarkKernelOneChange(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			if lab.InFreshNetns(b) {
				return
			}
			ports := scalePorts(n)
			nft := realNFT(b, ipfamily.IPv4)
			m := newTestMode(b, nil, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: nft})
			start := time.Now()
			mustSync(b, m, snapshotOf(1, ports...), full())
			fullSync := time.Since(start)

			var snaps [2]*servicemap.Snapshot
			var changes [2]*servicemap.ChangeSet
			for r := range 2 {
				next, cs := oneEndpointChange(ports, n/2, r)
				snaps[r], changes[r] = snapshotOf(uint64(r+2), next...), cs
			}
			round := 0
			for b.Loop() {
				round++
				mustSync(b, m, snaps[round%2], changes[round%2])
			}
			b.StopTimer()
			// A new service answering: one ClusterIP port of 10 endpoints
			// added (chain, rule and elements), synced on its own.
			var newService time.Duration
			cur := snaps[round%2]
			extra := scalePorts(n + 3)[n:]
			for k, sp := range extra {
				next := snapshotOf(uint64(round+10+k), append(slices.Collect(func(yield func(*servicemap.ServicePort) bool) {
					for _, p := range cur.All() {
						if !yield(p) {
							return
						}
					}
				}), sp)...)
				start := time.Now()
				mustSync(b, m, next, &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{sp.Name}})
				newService += time.Since(start)
				cur = next
			}
			newService /= time.Duration(len(extra))
			lister := NewNetlinkLister(ipfamily.IPv4, TableName)
			canary := timeIt(b, 5, func() error {
				_, err := lister.RuleCount(context.Background(), "reject-chain")
				return err
			})
			names := timeIt(b, 1, func() error {
				_, _, err := lister.Names(context.Background())
				return err
			})
			nftList := timeIt(b, 1, func() error {
				_, err := nft.ListRules(context.Background(), "reject-chain")
				return err
			})
			minimal := timeIt(b, 5, func() error {
				tx := nft.NewTransaction()
				tx.Add(&knftables.Element{Set: "cluster-ips", Key: []string{"198.51.100.1"}})
				tx.Delete(&knftables.Element{Set: "cluster-ips", Key: []string{"198.51.100.1"}})
				return nft.Run(context.Background(), tx)
			})
			b.ReportMetric(fullSync.Seconds(), "full-sync-s")
			b.ReportMetric(newService.Seconds(), "new-service-s")
			b.ReportMetric(canary.Seconds(), "canary-s")
			b.ReportMetric(minimal.Seconds(), "nft-min-s")
			b.ReportMetric(names.Seconds(), "names-s")
			b.ReportMetric(nftList.Seconds(), "nft-list-chain-s")
			_ = exec.Command("nft", "delete", "table", "ip", TableName).Run()
		})
	}
}

// cpuTime is the CPU time (user and system) of this process and of its
// children waited for.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			b.Fatalf("getrusage: %v", err)
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// timeIt returns the mean duration of n runs of f.
func timeIt(b *testing.B, n int, f func() error) time.Duration {
	b.Helper()
	start := time.Now()
	for range n {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkKernelDamageCheck measures, with the real nft in a fresh
// network namespace and 1,000 to 30,000 services of 10 endpoints
// programmed, what every sync pays to notice damage the canary chain does
// not show: the benchmark's ns/op is a sync's two reads of nf_tables'
// generation when nobody else wrote (the usual case). Same run:
// count-check-s, the comparison of every shared set's and map's element
// count with what was written (run when the generation moved by someone
// else's write), and repair-s, the sync after `nft flush map ip kube-proxy
// service-ips` until the map is whole again.
func BenchmarkKernelDamageCheck(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			if lab.InFreshNetns(b) {
				return
			}
			ports := scalePorts(n)
			nft := realNFT(b, ipfamily.IPv4)
			m := newTestMode(b, nil, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: nft})
			snap := snapshotOf(1, ports...)
			mustSync(b, m, snap, full())
			ctx := context.Background()
			for b.Loop() {
				before, _ := m.generation(ctx)
				after, _ := m.generation(ctx)
				if before != after {
					b.Fatal("the generation moved with nobody writing")
				}
			}
			b.StopTimer()
			f := m.families.List()[0]
			check := timeIt(b, 3, func() error {
				damage, _, err := f.damaged(ctx)
				if err == nil && damage != "" {
					err = fmt.Errorf("an intact table found damaged: %s", damage)
				}
				return err
			})
			lab.Run(b, "nft", "flush", "map", "ip", TableName, "service-ips")
			start := time.Now()
			mustSync(b, m, snap, &servicemap.ChangeSet{})
			repair := time.Since(start)
			if got, err := f.lister.ElementCount(ctx, "service-ips", true); err != nil || got != n {
				b.Fatalf("service-ips holds %d elements after the repair (%v); want %d", got, err, n)
			}
			b.ReportMetric(check.Seconds(), "count-check-s")
			b.ReportMetric(repair.Seconds(), "repair-s")
			_ = exec.Command("nft", "delete", "table", "ip", TableName).Run()
		})
	}
}

// BenchmarkKernelLargeAddition adds N services of 10 endpoints (N from
// KPROXY_NFT_ADDITION, default 2000) to 100 in one change, with the real
// nft in a fresh network namespace, syncing as the engine does (again at
// once while the mode has a backlog); one second into it, one endpoint of
// an existing service is removed. Reported: addition-s (until the backlog
// is written), removal-kernel-s (from the removal until the kernel took
// the write holding it), removal-s (until the end of the sync that wrote
// it, which goes on with the backlog for its budget), syncs, full-sync-s, a
// full sync of the same final state into an empty table, and ratio, the
// addition's time over the full sync's (the target is at most 1). The
// same with the process's CPU time (kernel time of its netlink writes and
// nft children included: the machine may be shared, and the CPU time of
// the two varies less than their wall time): addition-cpu-s, full-cpu-s
// and cpu-ratio.
func BenchmarkKernelLargeAddition(b *testing.B) {
	n := 2000
	if s := os.Getenv("KPROXY_NFT_ADDITION"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("KPROXY_NFT_ADDITION: %v", err)
		}
		n = v
	}
	b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
		if lab.InFreshNetns(b) {
			return
		}
		const before = 100
		all := scalePorts(before + n)
		for b.Loop() {
			m := newTestMode(b, nil, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: realNFT(b, ipfamily.IPv4)})
			mustSync(b, m, snapshotOf(1, all[:before]...), full())
			cs := &servicemap.ChangeSet{}
			for _, sp := range all[before:] {
				cs.Changed = append(cs.Changed, sp.Name)
			}
			shrunk := *all[7]
			shrunk.Endpoints = slices.Clone(all[7].Endpoints[:len(all[7].Endpoints)-1])
			next := slices.Clone(all)
			next[7] = &shrunk

			start, cpuStart := time.Now(), cpuTime(b)
			var removedAt time.Time
			var removal, inKernel time.Duration
			m.families.List()[0].wrote = func(names []servicemap.ServicePortName) {
				if !removedAt.IsZero() && inKernel == 0 && slices.Contains(names, shrunk.Name) {
					inKernel = time.Since(removedAt)
				}
			}
			syncs := 0
			snap := snapshotOf(2, all...)
			for {
				syncs++
				mustSync(b, m, snap, cs)
				if !removedAt.IsZero() && removal == 0 {
					removal = time.Since(removedAt)
				}
				if removedAt.IsZero() {
					// The removal arrives while that sync ran.
					removedAt = start.Add(time.Second)
					if time.Now().Before(removedAt) {
						removedAt = time.Now()
					}
					snap, cs = snapshotOf(3, next...), &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{shrunk.Name}}
					continue
				}
				if m.Backlog() == 0 {
					break
				}
				cs = &servicemap.ChangeSet{}
			}
			addition, additionCPU := time.Since(start), cpuTime(b)-cpuStart
			_ = exec.Command("nft", "delete", "table", "ip", TableName).Run()
			fresh := newTestMode(b, nil, map[ipfamily.Family]knftables.Interface{ipfamily.IPv4: realNFT(b, ipfamily.IPv4)})
			start, cpuStart = time.Now(), cpuTime(b)
			mustSync(b, fresh, snapshotOf(3, next...), full())
			fullSync, fullCPU := time.Since(start), cpuTime(b)-cpuStart
			_ = exec.Command("nft", "delete", "table", "ip", TableName).Run()
			b.ReportMetric(addition.Seconds(), "addition-s")
			b.ReportMetric(removal.Seconds(), "removal-s")
			b.ReportMetric(inKernel.Seconds(), "removal-kernel-s")
			b.ReportMetric(float64(syncs), "syncs")
			b.ReportMetric(fullSync.Seconds(), "full-sync-s")
			b.ReportMetric(addition.Seconds()/fullSync.Seconds(), "ratio")
			b.ReportMetric(additionCPU.Seconds(), "addition-cpu-s")
			b.ReportMetric(fullCPU.Seconds(), "full-cpu-s")
			b.ReportMetric(additionCPU.Seconds()/fullCPU.Seconds(), "cpu-ratio")
		}
	})
}
