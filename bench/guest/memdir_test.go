package guest

import "testing"

func TestMemBytes(t *testing.T) {
	for _, c := range []struct {
		mem  string
		want uint64
		ok   bool
	}{
		{"512M", 512 << 20, true},
		{"1G", 1 << 30, true},
		{"1T", 0, false},
		{"M", 0, false},
	} {
		got, ok := memBytes(c.mem)
		if got != c.want || ok != c.ok {
			t.Errorf("memBytes(%q) = %d, %v; want %d, %v", c.mem, got, ok, c.want, c.ok)
		}
	}
}

// More than any tmpfs holds, and a size UML would refuse, both leave guest
// RAM in the run directory.
func TestMemDirFallsBackToTheRunDirectory(t *testing.T) {
	for _, mem := range []string{"1000000000G", "bad"} {
		if got := memDir("/run/dir", mem); got != "/run/dir" {
			t.Errorf("memDir(/run/dir, %q) = %q, want the run directory", mem, got)
		}
	}
}
