package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Result is one spec's outcome, as the JUnit report gives it.
type Result string

const (
	Passed  Result = "passed"
	Failed  Result = "failed"
	Skipped Result = "skipped"
)

// Spec is one spec the run reached.
type Spec struct {
	Name     string
	Result   Result
	Duration time.Duration
	// Message is the failure's or skip's first line.
	Message string
}

// junitSuites is the part of a JUnit report the table needs.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string        `xml:"name,attr"`
			Time    float64       `xml:"time,attr"`
			Failure *junitMessage `xml:"failure"`
			Error   *junitMessage `xml:"error"`
			Skipped *junitMessage `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// junitMessage is a failure, error or skip: the framework leaves a
// failure's message attribute out and writes the text only.
type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func (m *junitMessage) summary() string {
	if m.Message != "" {
		return firstLine(m.Message)
	}
	return firstLine(m.Text)
}

// filteredOut is ginkgo's whole skip message for a spec that the focus and
// skip expressions left out; a spec that skipped itself says why after it.
const filteredOut = "skipped"

// ReadJUnit reads the specs of a JUnit report, leaving out the ones the
// run's focus and skip filtered away and the suite's setup and teardown
// nodes.
func ReadJUnit(r io.Reader) ([]Spec, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("decoding the JUnit report: %w", err)
	}
	var specs []Spec
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			if !strings.HasPrefix(c.Name, "[It] ") {
				continue // [SynchronizedBeforeSuite], [ReportAfterSuite] and the like
			}
			spec := Spec{Name: strings.TrimPrefix(c.Name, "[It] "), Result: Passed,
				Duration: time.Duration(c.Time * float64(time.Second))}
			switch {
			case c.Failure != nil:
				spec.Result, spec.Message = Failed, c.Failure.summary()
			case c.Error != nil:
				spec.Result, spec.Message = Failed, c.Error.summary()
			case c.Skipped != nil:
				if c.Skipped.Message == filteredOut {
					continue
				}
				spec.Result, spec.Message = Skipped, strings.TrimPrefix(c.Skipped.summary(), filteredOut+" - ")
			}
			specs = append(specs, spec)
		}
	}
	return specs, nil
}

// ReadJUnitFile is ReadJUnit on a file.
func ReadJUnitFile(path string) ([]Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the JUnit report: %w", err)
	}
	defer f.Close()
	specs, err := ReadJUnit(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return specs, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// Markdown renders specs as a table under a title, with a count line.
func Markdown(title string, specs []Spec) string {
	var b strings.Builder
	counts := map[Result]int{}
	for _, s := range specs {
		counts[s.Result]++
	}
	fmt.Fprintf(&b, "## %s\n\n%d specs: %d passed, %d failed, %d skipped.\n\n", title, len(specs), counts[Passed], counts[Failed], counts[Skipped])
	b.WriteString("| Spec | Result | Time | Note |\n|---|---|---|---|\n")
	for _, s := range specs {
		fmt.Fprintf(&b, "| %s | %s | %.1fs | %s |\n", cell(s.Name), s.Result, s.Duration.Seconds(), cell(s.Message))
	}
	return b.String()
}

// cell escapes what would end a table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// AllPassed reports whether the run reached specs and none failed.
func AllPassed(specs []Spec) bool {
	if len(specs) == 0 {
		return false
	}
	for _, s := range specs {
		if s.Result == Failed {
			return false
		}
	}
	return true
}
