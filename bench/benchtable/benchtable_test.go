package benchtable

import (
	"strings"
	"testing"
	"time"
)

func TestPage(t *testing.T) {
	got := Page([]string{"**title**", "Date: today"}, "| a |\n|---|\n", []string{"one note"})
	want := "**title**  \nDate: today  \n\n| a |\n|---|\n\none note  \n"
	if got != want {
		t.Errorf("Page =\n%q\nwant\n%q", got, want)
	}
	if got := Page(nil, "| a |\n", nil); got != "| a |\n" {
		t.Errorf("Page without header and notes = %q, want the table alone", got)
	}
}

func TestTable(t *testing.T) {
	tab := Table{Header: []string{"mode", "rate"}, Rows: [][]string{{"dnat", "18,300"}, {"userspace"}}}
	want := "| mode | rate |\n|---|---:|\n| dnat | 18,300 |\n| userspace |  |\n"
	if got := tab.Markdown(); got != want {
		t.Errorf("unpadded:\n%s\nwant\n%s", got, want)
	}
	tab.Pad = true
	want = "| mode      |   rate |\n| --------- | -----: |\n| dnat      | 18,300 |\n| userspace |        |\n"
	if got := tab.Markdown(); got != want {
		t.Errorf("padded:\n%s\nwant\n%s", got, want)
	}
	tab = Table{Header: []string{"a", "b", "target"}, Right: []bool{false, true, false}}
	if got, want := tab.Markdown(), "| a | b | target |\n|---|---:|---|\n"; got != want {
		t.Errorf("with alignments = %q, want %q", got, want)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 140037: "140,037", -1234567: "-1,234,567"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
	if got := Thousands(int64(10_000_000_000)); got != "10,000,000,000" {
		t.Errorf("Thousands(int64 1e10) = %q", got)
	}
	if got := Services(1); got != "1 service" {
		t.Errorf("Services(1) = %q", got)
	}
	if got := Services(10000); got != "10,000 services" {
		t.Errorf("Services(10000) = %q", got)
	}
}

func TestMachine(t *testing.T) {
	m := Machine()
	if !strings.Contains(m, " CPUs, Linux ") || strings.Contains(m, "Linux unknown") {
		t.Errorf("Machine() = %q: want the CPU count and the kernel release", m)
	}
	if got := LoadAverage(); len(strings.Fields(got)) != 3 {
		t.Errorf("LoadAverage() = %q, want three figures", got)
	}
	if got := FirstLineOf("sh", "-c", "exit 3"); got != "(sh: exit status 3)" {
		t.Errorf("FirstLineOf a failing command = %q, want what went wrong", got)
	}
	if got := FirstLineOf("sh", "-c", "echo one; echo two"); got != "one" {
		t.Errorf("FirstLineOf = %q, want the first line", got)
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tt.in); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	in := []time.Duration{400 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond, 200 * time.Millisecond}
	if got := Median(in); got != 250*time.Millisecond {
		t.Errorf("Median of durations = %v, want 250ms", got)
	}
	if in[0] != 400*time.Millisecond {
		t.Errorf("Median sorted its argument: %v", in)
	}
}
