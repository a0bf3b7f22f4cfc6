package kernelmode

import (
	"errors"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

func TestEachJoinsTheFamiliesErrors(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	for _, tc := range []struct {
		name string
		errs []error
		want []error
	}{
		{"none fails", []error{nil, nil}, nil},
		{"the first fails, the second still runs", []error{errA, nil}, []error{errA}},
		{"both fail", []error{errA, errB}, []error{errA, errB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fs Families[int]
			for i := range tc.errs {
				fs.Add(i)
			}
			var ran []int
			err := fs.Each(func(i int) error {
				ran = append(ran, i)
				return tc.errs[i]
			})
			if len(ran) != len(tc.errs) {
				t.Errorf("ran %v, want every family", ran)
			}
			if (err == nil) != (tc.want == nil) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("err %v does not hold %v", err, w)
				}
			}
		})
	}
}

func TestResyncAfterAFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		step    func(*Resync)
		changes servicemap.ChangeSet
		synced  bool
		want    bool
	}{
		{"first sync", func(*Resync) {}, servicemap.ChangeSet{}, false, true},
		{"asked for", func(*Resync) {}, servicemap.ChangeSet{Full: true}, true, true},
		{"partial", func(*Resync) {}, servicemap.ChangeSet{}, true, false},
		{"after a failure", func(r *Resync) { _ = r.Failed(ipfamily.IPv4, errors.New("x")) }, servicemap.ChangeSet{}, true, true},
		{"after damage", (*Resync).Damaged, servicemap.ChangeSet{}, true, true},
		{"after a full sync that followed a failure", func(r *Resync) {
			_ = r.Failed(ipfamily.IPv4, errors.New("x"))
			r.Synced()
		}, servicemap.ChangeSet{}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Resync
			tc.step(&r)
			if got := r.Full(&tc.changes, tc.synced); got != tc.want {
				t.Errorf("Full = %v, want %v", got, tc.want)
			}
			if r.Unknown() != (tc.want && tc.synced && !tc.changes.Full) {
				t.Errorf("Unknown = %v", r.Unknown())
			}
		})
	}
	var r Resync
	if err := r.Failed(ipfamily.IPv6, errors.New("boom")); err.Error() != "IPv6: boom" {
		t.Errorf("Failed: %q, want the family named", err)
	}
}

func TestTouched(t *testing.T) {
	a := servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}, Port: "http"}
	b := servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "b"}, Port: "http"}
	for _, tc := range []struct {
		name    string
		changes servicemap.ChangeSet
		want    []servicemap.ServicePortName
	}{
		{"none", servicemap.ChangeSet{}, []servicemap.ServicePortName{}},
		{"changed, sorted", servicemap.ChangeSet{Changed: []servicemap.ServicePortName{b, a}}, []servicemap.ServicePortName{a, b}},
		{"removed once", servicemap.ChangeSet{Changed: []servicemap.ServicePortName{a}, Removed: []*servicemap.ServicePort{{Name: a}, {Name: b}}},
			[]servicemap.ServicePortName{a, b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Touched(&tc.changes); !slices.Equal(got, tc.want) {
				t.Errorf("Touched = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestProgrammedJoinsTheFamilies(t *testing.T) {
	chains := map[ipfamily.Family][]mode.Chain{ipfamily.IPv4: {{Family: ipfamily.IPv4, Name: "c4"}}, ipfamily.IPv6: {{Family: ipfamily.IPv6, Name: "c6"}}}
	for _, tc := range []struct {
		name     string
		fams     []ipfamily.Family
		want     int
		wantNote bool
	}{
		{"none", nil, 0, true},
		{"one", []ipfamily.Family{ipfamily.IPv4}, 1, false},
		{"both", []ipfamily.Family{ipfamily.IPv4, ipfamily.IPv6}, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Programmed(tc.fams, func(f ipfamily.Family, _ servicemap.ServicePortName) []mode.Chain { return chains[f] }, "note")(servicemap.ServicePortName{})
			if len(got.Chains) != tc.want || (got.Note != "") != tc.wantNote {
				t.Errorf("got %+v, want %d chains, note %v", got, tc.want, tc.wantNote)
			}
		})
	}
}
