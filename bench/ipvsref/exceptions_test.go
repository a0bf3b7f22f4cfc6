package ipvsref

import (
	"slices"
	"testing"
)

// Whose dump a line comes from.
const (
	sideKubeProxy = "kube-proxy"
	sideKproxy    = "kproxy"
)

// knownException is a difference kproxy makes on purpose and documents: a
// normalised line that one side's section has and the other's lacks.
type knownException struct {
	section string // a Section.Name
	side    string // sideKubeProxy or sideKproxy: whose line it is
	line    string
	why     string // where kproxy documents it
}

// knownExceptions lists the deliberate differences, each with why. There
// are none: every difference the comparison shows is a finding.
func knownExceptions() []knownException { return nil }

// withoutExceptions drops from side's sections the lines the exceptions
// name.
func withoutExceptions(sections []Section, side string, exceptions []knownException) []Section {
	out := make([]Section, 0, len(sections))
	for _, s := range sections {
		lines := slices.DeleteFunc(slices.Clone(s.Lines), func(line string) bool {
			return slices.ContainsFunc(exceptions, func(e knownException) bool {
				return e.side == side && e.section == s.Name && e.line == line
			})
		})
		out = append(out, Section{Name: s.Name, Lines: lines})
	}
	return out
}

func TestWithoutExceptions(t *testing.T) {
	sections := []Section{{"ipvs", []string{"a", "b"}}, {"sets", []string{"b"}}}
	exceptions := []knownException{
		{section: "ipvs", side: sideKproxy, line: "b", why: "test"},
		{section: "ipvs", side: sideKubeProxy, line: "a", why: "test: other side"},
	}
	got := withoutExceptions(sections, sideKproxy, exceptions)
	want := []Section{{"ipvs", []string{"a"}}, {"sets", []string{"b"}}}
	if !slices.EqualFunc(got, want, func(a, b Section) bool { return a.Name == b.Name && slices.Equal(a.Lines, b.Lines) }) {
		t.Errorf("withoutExceptions = %v, want %v", got, want)
	}
	if !slices.Equal(sections[0].Lines, []string{"a", "b"}) {
		t.Errorf("withoutExceptions changed its input: %v", sections[0].Lines)
	}
}
