package conformance

import (
	"strings"
	"testing"
	"time"
)

func TestReadJUnit(t *testing.T) {
	const head = `<?xml version="1.0" encoding="UTF-8"?><testsuites><testsuite name="Kubernetes e2e suite">`
	const tail = `</testsuite></testsuites>`
	tests := []struct {
		name  string
		cases string
		want  []Spec
	}{
		{
			name:  "passed",
			cases: `<testcase name="[It] [sig-network] Services should serve a basic endpoint [Conformance]" time="12.5"></testcase>`,
			want:  []Spec{{Name: "[sig-network] Services should serve a basic endpoint [Conformance]", Result: Passed, Duration: 12500 * time.Millisecond}},
		},
		{
			name: "failed, the message in the text only",
			cases: `<testcase name="[It] a spec" time="3"><failure type="failed">
[FAILED] service not reachable
more detail</failure></testcase>`,
			want: []Spec{{Name: "a spec", Result: Failed, Duration: 3 * time.Second, Message: "[FAILED] service not reachable"}},
		},
		{
			name:  "interrupted",
			cases: `<testcase name="[It] a spec" time="1"><error message="interrupted by timeout"></error></testcase>`,
			want:  []Spec{{Name: "a spec", Result: Failed, Duration: time.Second, Message: "interrupted by timeout"}},
		},
		{
			name:  "filtered out by focus or skip: left out",
			cases: `<testcase name="[It] another spec" time="0"><skipped message="skipped"></skipped></testcase>`,
		},
		{
			name:  "skipped by the spec itself: kept with its reason",
			cases: `<testcase name="[It] a spec" time="0.5"><skipped message="skipped - needs 3 nodes"></skipped></testcase>`,
			want:  []Spec{{Name: "a spec", Result: Skipped, Duration: 500 * time.Millisecond, Message: "needs 3 nodes"}},
		},
		{
			name:  "suite nodes left out",
			cases: `<testcase name="[SynchronizedBeforeSuite]" time="2"></testcase><testcase name="[ReportAfterSuite] Kubernetes e2e JUnit report" time="0"></testcase>`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadJUnit(strings.NewReader(head + tt.cases + tail))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d specs %+v, want %d %+v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("spec %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestMarkdown(t *testing.T) {
	tests := []struct {
		name      string
		specs     []Spec
		want      []string
		allPassed bool
	}{
		{
			name:      "counts and rows",
			specs:     []Spec{{Name: "a", Result: Passed, Duration: time.Second}, {Name: "b|c", Result: Failed, Message: "x|y"}},
			want:      []string{"2 specs: 1 passed, 1 failed, 0 skipped.", "| a | passed | 1.0s |  |", `| b\|c | failed | 0.0s | x\|y |`},
			allPassed: false,
		},
		{
			name:      "skips do not fail the run",
			specs:     []Spec{{Name: "a", Result: Passed}, {Name: "b", Result: Skipped}},
			want:      []string{"2 specs: 1 passed, 0 failed, 1 skipped."},
			allPassed: true,
		},
		{
			name:      "no specs is no pass",
			want:      []string{"0 specs"},
			allPassed: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := Markdown("title", tt.specs)
			for _, w := range tt.want {
				if !strings.Contains(md, w) {
					t.Errorf("the table lacks %q:\n%s", w, md)
				}
			}
			if got := AllPassed(tt.specs); got != tt.allPassed {
				t.Errorf("AllPassed = %v, want %v", got, tt.allPassed)
			}
		})
	}
}

func TestSelect(t *testing.T) {
	for _, name := range []string{"services", "conformance", "wide", "serial"} {
		sel, err := Select(name)
		if err != nil || sel.Focus == "" || sel.Skip == "" {
			t.Errorf("Select(%q) = %+v, %v; want a focus and a skip", name, sel, err)
		}
	}
	if _, err := Select("all"); err == nil {
		t.Error(`Select("all") succeeded; want an error naming the selections`)
	}
}
