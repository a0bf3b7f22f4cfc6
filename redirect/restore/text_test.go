package restore

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	cases := []struct {
		line string
		want []string
	}{
		{`-A KUBE-A -j ACCEPT`, []string{"-A", "KUBE-A", "-j", "ACCEPT"}},
		{"-m comment --comment \"a b\"\t-j  X", []string{"-m", "comment", "--comment", "a b", "-j", "X"}},
		{`--comment "it\'s \"x\""`, []string{"--comment", `it's "x"`}},
		{`--comment "back\\slash"`, []string{"--comment", `back\slash`}},
		{`--comment ""`, []string{"--comment", ""}},
		// Outside quotes a backslash is an ordinary character.
		{`a\b c`, []string{`a\b`, "c"}},
	}
	for _, tc := range cases {
		got, err := SplitRule(tc.line)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("SplitRule(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
	if _, err := SplitRule(`--comment "open`); err == nil {
		t.Error("an unterminated quote was accepted")
	}
}

// The expected lines are what iptables-save 1.8.9 printed for these comments.
func TestJoinQuotesLikeIPTablesSave(t *testing.T) {
	cases := []struct {
		comment, want string
	}{
		{"foo", `-m comment --comment foo`},
		{"a_b-c", `-m comment --comment a_b-c`},
		{"a.b", `-m comment --comment "a.b"`},
		{"ns/svc:p", `-m comment --comment "ns/svc:p"`},
		{"foo bar", `-m comment --comment "foo bar"`},
		{`a "quoted" x`, `-m comment --comment "a \"quoted\" x"`},
		{"it's", `-m comment --comment "it\'s"`},
		{`back\slash`, `-m comment --comment "back\\slash"`},
		{"", `-m comment --comment ""`},
	}
	for _, tc := range cases {
		words := []string{"-m", "comment", "--comment", tc.comment}
		got := JoinRule(words)
		if got != tc.want {
			t.Errorf("JoinRule(comment %q) = %s, want %s", tc.comment, got, tc.want)
		}
		back, err := SplitRule(got)
		if err != nil || !slices.Equal(back, words) {
			t.Errorf("SplitRule(JoinRule(%q)) = %q, %v: does not round-trip", words, back, err)
		}
	}
	if got := JoinRule([]string{"-d", "10.0.0.1/32", "--to-destination", "[fd00::1]:80", "x y"}); got != `-d 10.0.0.1/32 --to-destination [fd00::1]:80 "x y"` {
		t.Errorf("Join quoted a word that needs no quotes, or missed one: %s", got)
	}
}
