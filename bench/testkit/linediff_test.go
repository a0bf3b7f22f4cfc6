package testkit

import (
	"strings"
	"testing"
)

func TestAlignLines(t *testing.T) {
	render := func(ops []LineOp) string {
		parts := make([]string, len(ops))
		for i, op := range ops {
			parts[i] = string(op.Kind) + op.Line
		}
		return strings.Join(parts, "|")
	}
	tests := []struct {
		name string
		a, b string
		want string
	}{
		{"equal", "x y z", "x y z", " x| y| z"},
		{"both empty", "", "", ""},
		{"one added in the middle", "x z", "x y z", " x|+y| z"},
		{"one removed at the end", "x y z", "x y", " x| y|-z"},
		{"changed line: removal first", "x y z", "x q z", " x|-y|+q| z"},
		{"all different", "a b", "c", "-a|-b|+c"},
		{"from nothing", "", "a b", "+a|+b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops := AlignLines(strings.Fields(tt.a), strings.Fields(tt.b))
			if got := render(ops); got != tt.want {
				t.Errorf("AlignLines(%q, %q) = %q, want %q", tt.a, tt.b, got, tt.want)
			}
			// Replaying the ops rebuilds both sides, at the positions given.
			var ra, rb []string
			for _, op := range ops {
				if op.Kind != '+' {
					if op.A != len(ra) {
						t.Errorf("op %+v: A = %d, want %d", op, op.A, len(ra))
					}
					ra = append(ra, op.Line)
				}
				if op.Kind != '-' {
					if op.B != len(rb) {
						t.Errorf("op %+v: B = %d, want %d", op, op.B, len(rb))
					}
					rb = append(rb, op.Line)
				}
			}
			if strings.Join(ra, " ") != tt.a || strings.Join(rb, " ") != tt.b {
				t.Errorf("replay gave %q and %q", ra, rb)
			}
		})
	}
}
