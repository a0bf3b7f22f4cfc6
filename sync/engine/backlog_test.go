package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/runner"
	"kproxy.dev/kproxy/sync/serve/healthz"
	"kproxy.dev/kproxy/sync/servicemap"
)

// backlogMode is a fakeMode that writes a large change over several syncs:
// each sync takes one unit off its backlog.
type backlogMode struct {
	fakeMode
	backlog int
}

func (m *backlogMode) Sync(ctx context.Context, snap *servicemap.Snapshot, cs *servicemap.ChangeSet) error {
	if err := m.fakeMode.Sync(ctx, snap, cs); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.backlog > 0 {
		m.backlog--
	}
	return nil
}

func (m *backlogMode) Backlog() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.backlog
}

// TestBacklogIsDrained: while the mode has a backlog, a sync with nothing
// changed still reaches it, and the snapshot does not count as in force;
// once the backlog is written, empty syncs skip the mode again.
func TestBacklogIsDrained(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clock := clocktesting.NewFakeClock(t0)
	met := metrics.New()
	smap := &fakeMap{synced: true}
	m := &backlogMode{}
	var seen []observed
	e, err := New(Config{Map: smap, Mode: m, Metrics: met, Health: healthz.New(time.Minute, met, clock),
		SyncPeriod: 30 * time.Second, Clock: clock, Observers: []SyncObserver{recordingObserver{"conntrack", &seen}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sync(ctx, runner.Requested); err != nil { // the first, full sync
		t.Fatal(err)
	}
	m.takeCalls()
	seen = nil
	m.mu.Lock()
	m.backlog = 3 // a large change the next sync starts
	m.mu.Unlock()
	smap.queue(&servicemap.ChangeSet{Changed: []servicemap.ServicePortName{portName("a")}})
	for i := range 4 {
		if err := e.sync(ctx, runner.Requested); err != nil {
			t.Fatal(err)
		}
		if calls := m.takeCalls(); len(calls) != 1 {
			t.Fatalf("sync %d: the mode was called %d times with a backlog of %d left; want once", i, len(calls), m.Backlog()+1)
		}
		inForce := e.lastGood.Generation == smap.gen
		if want := m.Backlog() == 0; inForce != want {
			t.Errorf("sync %d: snapshot in force = %v with a backlog of %d", i, inForce, m.Backlog())
		}
		if m.Backlog() == 0 {
			break
		}
	}
	// Observed at once (an endpoint removal's flows go promptly), and again
	// once all of it is written (a new UDP service's flows are cleaned up
	// after its rules, not before).
	a := []servicemap.ServicePortName{portName("a")}
	if last := len(seen) - 1; last < 1 || !slices.Equal(seen[0].Changed, a) || !slices.Equal(seen[last].Changed, a) {
		t.Errorf("observers saw %+v; want the change at its first sync and again after the backlog's last", seen)
	}
	if err := e.sync(ctx, runner.Requested); err != nil {
		t.Fatal(err)
	}
	if calls := m.takeCalls(); len(calls) != 0 {
		t.Errorf("an empty sync without a backlog reached the mode: %v", calls)
	}
}
