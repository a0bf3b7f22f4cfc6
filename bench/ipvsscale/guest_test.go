package ipvsscale

import (
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// The tests and benchmarks in this file need IPVS, which the host kernel
// lacks: they run in the guest kernel and skip elsewhere.

// TestMain lets BenchmarkIPVSScale boot the guest with this test binary as
// the guest's init.
func TestMain(m *testing.M) {
	if guest.RunningAsInit() {
		guest.RunInit() // never returns
	}
	os.Exit(m.Run())
}

// TestGuestIPVSScaleSmoke runs the benchmark's steps at 50 service ports
// against the guest kernel (see checkSyncSteps), so make test-guest
// exercises this code path in a few seconds.
func TestGuestIPVSScaleSmoke(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	if lab.InFreshNetns(t) {
		return
	}
	checkSyncSteps(t, kernelRig(t), Workload{Ports: 50, Endpoints: EndpointsPerPort})
}

// BenchmarkGuestIPVSSync measures the IPVS mode's netlink half at each size
// (SizesEnv, default 1,000 and 10,000 service ports of 10 endpoints), each
// in a fresh network namespace: the first full apply into an empty kernel
// (once, whatever b.N), then one-endpoint changes (b.Loop, so ns/op is one
// change's sync), an incremental sync and a full resync with nothing to do.
func BenchmarkGuestIPVSSync(b *testing.B) {
	guest.SkipUnlessInGuest(b)
	s, err := SettingsFromEnv(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range s.Sizes {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			if lab.InFreshNetns(b) {
				return
			}
			benchSync(b, Workload{Ports: n, Endpoints: EndpointsPerPort})
		})
	}
}

func benchSync(b *testing.B, w Workload) {
	logGuestKernel(b)
	states := mustStates(b, w)
	rig := kernelRig(b)

	full := mustSync(b, rig, states.Base, true)
	b.Logf("%s: full apply took %v: %s", w, full.Took.Round(time.Millisecond), rig.Counter)
	checkInventory(b, rig, states.Base)

	changes, changeOps := 0, 0
	var changeTook time.Duration
	for b.Loop() {
		res := mustSync(b, rig, states.Changed[changes%2], false)
		changes++
		changeOps += res.Ops.Total()
		changeTook += res.Took
	}
	last := states.Changed[(changes-1)%2]
	checkService(b, rig, last, ChangedKey())
	b.Logf("%s: last one-endpoint change: %s", w, rig.Counter)

	noChange := mustSync(b, rig, last, false)
	resync := mustSync(b, rig, last, true)
	b.Logf("%s: full resync with nothing changed took %v: %s", w, resync.Took.Round(time.Millisecond), rig.Counter)
	if resync.Ops.Writes != 0 {
		b.Errorf("full resync with nothing changed wrote %d times (%s), want 0", resync.Ops.Writes, rig.Counter)
	}
	checkInventory(b, rig, last)

	b.ReportMetric(full.Took.Seconds(), UnitFullSync)
	b.ReportMetric(float64(full.Ops.Total()), UnitFullSyncOps)
	b.ReportMetric(float64(changeTook.Microseconds())/1000/float64(changes), UnitChange)
	b.ReportMetric(float64(changeOps)/float64(changes), UnitChangeOps)
	b.ReportMetric(float64(noChange.Ops.Total()), UnitNoChangeOps)
	b.ReportMetric(resync.Took.Seconds(), UnitFullResync)
	b.ReportMetric(float64(resync.Ops.Reads), UnitFullResyncReads)
	b.ReportMetric(float64(resync.Ops.Ensures), UnitFullResyncEnsures)
	b.ReportMetric(float64(resync.Ops.Writes), UnitFullResyncWrites)
}

// logGuestKernel names the kernel in the output, where BenchmarkIPVSScale
// reads it for the table's header.
func logGuestKernel(b *testing.B) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		b.Fatalf("uname: %v", err)
	}
	b.Logf("ipvsscale: guest kernel %s", unix.ByteSliceToString(u.Release[:]))
}
