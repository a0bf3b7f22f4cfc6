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

func TestSplitRuleSlicesUnquotedWords(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`-A X -j Y`, []string{"-A", "X", "-j", "Y"}},
		{`-A X -m comment --comment "a -j KUBE-SERVICES" -j RETURN`, []string{"-A", "X", "-m", "comment", "--comment", "a -j KUBE-SERVICES", "-j", "RETURN"}},
		{`-A X -m comment --comment "say \"hi\"" -j RETURN`, []string{"-A", "X", "-m", "comment", "--comment", `say "hi"`, "-j", "RETURN"}},
		{"a\r", []string{"a"}},
		{`x"y z"w v`, []string{"xy zw", "v"}},
		{"", []string{}},
	} {
		got, err := SplitRule(tc.line)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("SplitRule(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
}

// Every comment rendered by the quoting rule splits back into the same
// words, written into a buffer in pieces (QuoteTail) or whole (Quote).
func TestQuoteRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		comment, want string
	}{
		{"web", "web"},
		{"a_b-C9", "a_b-C9"},
		{"", `""`},
		{"ns/svc:port", `"ns/svc:port"`},
		{"ns/svc:port -> 10.0.0.1:80", `"ns/svc:port -> 10.0.0.1:80"`},
		{`it's "x" a\b`, `"it\'s \"x\" a\\b"`},
		{`"`, `"\""`},
		{"tab\there", "\"tab\there\""},
		{"ünïcode", `"ünïcode"`},
	} {
		if got := Quote(tc.comment); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.comment, got, tc.want)
		}
		prefix := "-A X -m comment --comment "
		buf := []byte(prefix)
		for i := range len(tc.comment) { // byte by byte, as a writer would
			buf = append(buf, tc.comment[i])
		}
		buf = append(QuoteTail(buf, len(prefix)), " -j RETURN"...)
		if got, want := string(buf), prefix+tc.want+" -j RETURN"; got != want {
			t.Errorf("QuoteTail: %s, want %s", got, want)
		}
		words, err := SplitRule(string(buf))
		if want := []string{"-A", "X", "-m", "comment", "--comment", tc.comment, "-j", "RETURN"}; err != nil || !slices.Equal(words, want) {
			t.Errorf("SplitRule(%s) = %q, %v; want %q", buf, words, err, want)
		}
		if got, want := CommentMatch(tc.comment), "-m comment --comment "+tc.want; got != want {
			t.Errorf("CommentMatch(%q) = %s, want %s", tc.comment, got, want)
		}
	}
}

func TestJumpTargetOfWords(t *testing.T) {
	for _, tc := range []struct {
		rule, want string
	}{
		{"-m comment --comment x -j KUBE-SERVICES", "KUBE-SERVICES"},
		{"-g KUBE-A", "KUBE-A"},
		{"--jump KUBE-A", "KUBE-A"},
		{"--goto KUBE-A", "KUBE-A"},
		{"-j DNAT --to-destination 10.0.0.1:80", "DNAT"},
		{"-m conntrack --ctstate NEW", ""},
		{"-j", ""},
		{"", ""},
	} {
		words, _ := SplitRule(tc.rule)
		if got := JumpTarget(words); got != tc.want {
			t.Errorf("JumpTarget(%q) = %q, want %q", tc.rule, got, tc.want)
		}
	}
}
