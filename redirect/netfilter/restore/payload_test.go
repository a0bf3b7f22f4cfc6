package restore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPayloadRendering(t *testing.T) {
	lines := func(ls ...string) string {
		if len(ls) == 0 {
			return ""
		}
		return strings.Join(ls, "\n") + "\n"
	}
	cases := []struct {
		name   string
		order  []string
		write  func(p *Payload)
		want   string
		chains int
	}{
		{
			name: "empty",
			want: "",
		},
		{
			name:  "a table listed but not written to is left out",
			order: []string{"mangle", "nat", "filter"},
			write: func(p *Payload) { p.Declare("nat", "KUBE-A") },
			want:  lines("*nat", ":KUBE-A - [0:0]", "COMMIT"), chains: 1,
		},
		{
			name:  "tables in the given order, then in order of first use",
			order: []string{"nat", "filter"},
			write: func(p *Payload) {
				p.Append("raw", "PREROUTING", "-j CT --notrack")
				p.Append("filter", "KUBE-F", "-j ACCEPT")
				p.Append("nat", "KUBE-N", "-j RETURN")
			},
			want: lines("*nat", "-A KUBE-N -j RETURN", "COMMIT", "*filter", "-A KUBE-F -j ACCEPT", "COMMIT", "*raw", "-A PREROUTING -j CT --notrack", "COMMIT"),
		},
		{
			name: "declarations, removals, lines in order, deletions last",
			write: func(p *Payload) {
				p.Remove("nat", "KUBE-OLD")
				p.WriteChain("nat", "KUBE-SVC", []string{"-j KUBE-SEP-1", "-j KUBE-SEP-2"})
				p.Delete("nat", "KUBE-SERVICES", "-j KUBE-OLD")
				p.Insert("nat", "KUBE-SERVICES", "-j KUBE-SVC")
				p.Append("nat", "KUBE-EMPTY", "")
			},
			want: lines("*nat",
				":KUBE-SVC - [0:0]",
				":KUBE-OLD - [0:0]",
				"-A KUBE-SVC -j KUBE-SEP-1",
				"-A KUBE-SVC -j KUBE-SEP-2",
				"-D KUBE-SERVICES -j KUBE-OLD",
				"-I KUBE-SERVICES 1 -j KUBE-SVC",
				"-A KUBE-EMPTY",
				"-X KUBE-OLD",
				"COMMIT"),
			chains: 2,
		},
		{
			name: "rules given as words are joined by JoinRule",
			write: func(p *Payload) {
				p.AppendWords("nat", "KUBE-A", []string{"-p", "tcp", "-m", "comment", "--comment", `ns/a:p "x"`, "-j", "RETURN"})
				p.AppendWords("nat", "KUBE-A", []string{"-m", "comment", "--comment", "plain", "-j", "RETURN"})
				p.AppendWords("nat", "KUBE-A", nil)
			},
			want: lines("*nat", `-A KUBE-A -p tcp -m comment --comment "ns/a:p \"x\"" -j RETURN`, "-A KUBE-A -m comment --comment plain -j RETURN", "-A KUBE-A", "COMMIT"),
		},
		{
			name: "a saved rule deleted as printed",
			write: func(p *Payload) {
				p.DeleteSaved("filter", NewSavedRule("INPUT", `-m comment --comment "a b" -j KUBE-X`))
			},
			want: lines("*filter", `-D INPUT -m comment --comment "a b" -j KUBE-X`, "COMMIT"),
		},
		{
			name: "merge appends table by table",
			write: func(p *Payload) {
				p.Declare("nat", "KUBE-A")
				q := NewPayload("filter", "nat")
				q.Declare("filter", "KUBE-F")
				q.Declare("nat", "KUBE-B")
				q.Remove("nat", "KUBE-C")
				p.Merge(q)
			},
			want:   lines("*nat", ":KUBE-A - [0:0]", ":KUBE-B - [0:0]", ":KUBE-C - [0:0]", "-X KUBE-C", "COMMIT", "*filter", ":KUBE-F - [0:0]", "COMMIT"),
			chains: 4,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPayload(tc.order...)
			if tc.write != nil {
				tc.write(p)
			}
			if diff := cmp.Diff(tc.want, p.String()); diff != "" {
				t.Errorf("payload (-want +got):\n%s", diff)
			}
			if b := p.Bytes(); len(b) > p.size() || cap(b) != p.size() {
				t.Errorf("size() = %d, rendered %d bytes in a buffer of %d", p.size(), len(b), cap(b))
			}
			if p.Empty() != (tc.want == "") {
				t.Errorf("Empty() = %t", p.Empty())
			}
			if p.Chains() != tc.chains {
				t.Errorf("Chains() = %d, want %d", p.Chains(), tc.chains)
			}
		})
	}
}

func TestChunksBoundaries(t *testing.T) {
	cases := []struct {
		name   string
		max    int
		groups []int // chains written per Fit call
		want   []int // chains per payload
	}{
		{"unlimited: one payload", 0, []int{3, 4, 5}, []int{12}},
		{"exactly full stays", 5, []int{2, 3}, []int{5}},
		{"one over starts the next", 5, []int{2, 3, 1}, []int{5, 1}},
		{"a group is never split", 5, []int{2, 4}, []int{2, 4}},
		{"a group larger than the limit fills one payload alone", 3, []int{1, 7, 1}, []int{1, 7, 1}},
		{"first group larger than the limit: no empty payload before it", 3, []int{7}, []int{7}},
		{"single chains", 2, []int{1, 1, 1, 1, 1}, []int{2, 2, 1}},
		{"empty groups never start a payload", 2, []int{2, 0, 0}, []int{2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewChunks(tc.max, "nat")
			for g, n := range tc.groups {
				p := c.Fit(n)
				for i := range n {
					p.Declare("nat", fmt.Sprintf("KUBE-%d-%d", g, i))
				}
			}
			var got []int
			for _, p := range c.Payloads() {
				got = append(got, p.Chains())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("chains per payload (-want +got):\n%s", diff)
			}
			if c.Split() != (tc.max > 0) {
				t.Errorf("Split() = %t", c.Split())
			}
		})
	}
	c := NewChunks(5)
	c.Current().Declare("nat", "KUBE-A")
	if c.Next() != c.Current() || len(c.Payloads()) != 2 {
		t.Errorf("Next did not start a new current payload")
	}
}
