package engine

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/sync/runner"
	"kproxy.dev/kproxy/sync/servicemap"
)

// recordingObserver notes what each AfterSync call was given, tagged with
// its name so the order of several observers shows.
type recordingObserver struct {
	name string
	log  *[]observed
}

type observed struct {
	Observer   string
	Generation uint64
	Full       bool
	Changed    []servicemap.ServicePortName
}

func (o recordingObserver) AfterSync(_ context.Context, snap *servicemap.Snapshot, cs *servicemap.ChangeSet) {
	*o.log = append(*o.log, observed{o.name, snap.Generation, cs.Full, cs.Changed})
}

func TestObserversSeeEverySuccessfulSync(t *testing.T) {
	a, b := portName("a"), portName("b")
	type step struct {
		queue  *servicemap.ChangeSet
		fail   bool
		reason runner.Reason
		want   []observed
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "each observer in turn, after the mode",
			steps: []step{
				{want: []observed{{"first", 1, true, nil}, {"second", 1, true, nil}}},
				{queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{a}},
					want: []observed{{"first", 2, false, []servicemap.ServicePortName{a}}, {"second", 2, false, []servicemap.ServicePortName{a}}}},
			},
		},
		{
			name: "a failed sync is not observed; its retry is, with the changes merged",
			steps: []step{
				{want: []observed{{"first", 1, true, nil}, {"second", 1, true, nil}}},
				{queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{a}}, fail: true},
				{queue: &servicemap.ChangeSet{Changed: []servicemap.ServicePortName{b}}, reason: runner.Retry,
					want: []observed{{"first", 3, false, []servicemap.ServicePortName{a, b}}, {"second", 3, false, []servicemap.ServicePortName{a, b}}}},
			},
		},
		{
			name: "a sync with nothing to do is not observed, a periodic one is",
			steps: []step{
				{want: []observed{{"first", 1, true, nil}, {"second", 1, true, nil}}},
				{},
				{reason: runner.Periodic, want: []observed{{"first", 3, false, nil}, {"second", 3, false, nil}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			var log []observed
			e, err := New(Config{Map: f.smap, Mode: f.mode, Metrics: f.metrics, Health: f.health, Clock: f.clock,
				Observers: []SyncObserver{recordingObserver{"first", &log}, recordingObserver{"second", &log}}})
			if err != nil {
				t.Fatal(err)
			}
			f.engine = e
			f.smap.synced = true
			for i, s := range tt.steps {
				if s.queue != nil {
					f.smap.queue(s.queue)
				}
				if s.fail {
					f.mode.failNext(1)
				}
				log = nil
				_ = f.tick(s.reason)
				if diff := cmp.Diff(s.want, log); diff != "" {
					t.Errorf("step %d: observed (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}
