package handles_test

import (
	"slices"
	"strings"
	"testing"
)

// contractCase is one scenario of a contract: setup calls that must
// succeed, then the call the case is about, which must end with want on
// every implementation. after, when not nil, is what the implementation's
// readback must show once the call returned.
type contractCase[E any] struct {
	name  string
	needs string // a kernel feature the case needs ("dummy links"), or ""
	setup func(E) error
	call  func(E) error
	want  string // outcome code: "ok", "EEXIST", "IPSET_ERR_EXIST", ...
	after []string
}

// implementation is one side of a contract: a fake or the kernel.
type implementation[E any] struct {
	name string
	// fresh returns an environment in its empty state.
	fresh func(t *testing.T) E
	// read renders what the environment holds, sorted.
	read func(E) ([]string, error)
	// lacks says why the implementation cannot run a case needing
	// feature, or "".
	lacks func(feature string) string
}

type observed struct {
	impl    string
	outcome outcome
	state   []string
}

// runContract runs every case on every implementation, checks each against
// the case, and checks that all implementations ended the same way and
// hold the same state afterwards.
func runContract[E any](t *testing.T, cases []contractCase[E], impls ...implementation[E]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var seen []observed
			for _, im := range impls {
				if c.needs != "" && im.lacks != nil {
					if why := im.lacks(c.needs); why != "" {
						t.Logf("%s: not run: %s", im.name, why)
						continue
					}
				}
				seen = append(seen, runCase(t, c, im))
			}
			for _, o := range seen[min(1, len(seen)):] {
				if !o.outcome.equal(seen[0].outcome) {
					t.Errorf("%s ended %s, %s ended %s", seen[0].impl, seen[0].outcome, o.impl, o.outcome)
				}
				if !slices.Equal(o.state, seen[0].state) {
					t.Errorf("%s holds\n%s\n%s holds\n%s", seen[0].impl, lines(seen[0].state), o.impl, lines(o.state))
				}
			}
		})
	}
}

func runCase[E any](t *testing.T, c contractCase[E], im implementation[E]) observed {
	t.Helper()
	env := im.fresh(t)
	if c.setup != nil {
		if err := c.setup(env); err != nil {
			t.Fatalf("%s: setting up: %v", im.name, err)
		}
	}
	got := outcomeOf(c.call(env))
	if got.code != c.want {
		t.Errorf("%s: ended %s, want %s", im.name, got, c.want)
	}
	state, err := im.read(env)
	if err != nil {
		t.Fatalf("%s: reading back: %v", im.name, err)
	}
	if want := slices.Sorted(slices.Values(c.after)); c.after != nil && !slices.Equal(state, want) {
		t.Errorf("%s: holds\n%s\nwant\n%s", im.name, lines(state), lines(want))
	}
	return observed{impl: im.name, outcome: got, state: state}
}

func lines(s []string) string {
	if len(s) == 0 {
		return "\t(nothing)"
	}
	return "\t" + strings.Join(s, "\n\t")
}

// all runs calls in order and stops at the first error.
func all(calls ...func() error) error {
	for _, call := range calls {
		if err := call(); err != nil {
			return err
		}
	}
	return nil
}
