package restore

import (
	"testing"
)

func TestJumpTarget(t *testing.T) {
	cases := map[string]Jump{
		"KUBE-A":    {Args: []string{"-m", "comment", "--comment", "x -j y", "-j", "KUBE-A"}},
		"KUBE-G":    {Args: []string{"-g", "KUBE-G"}},
		"last-word": {Args: []string{"-p", "tcp", "last-word"}},
		"":          {},
	}
	for want, j := range cases {
		if got := j.Target(); got != want {
			t.Errorf("Target(%q) = %q, want %q", j.Args, got, want)
		}
	}
}
