package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// SchemaVersion is the version of Report's JSON; a reader refuses others.
const SchemaVersion = 1

// Report is one make conformance run: the specs' results under every node
// proxy configuration it took, one after the other in one cluster.
type Report struct {
	Schema  int        `json:"schema"`
	Header  Header     `json:"header"`
	Proxies []ProxyRun `json:"proxies"`
}

// Header says where and how the run was made.
type Header struct {
	Date    time.Time `json:"date"`
	Kernel  string    `json:"kernel"`
	Cores   int       `json:"cores"`
	Commit  string    `json:"commit"`
	Command string    `json:"command"`
	Nodes   int       `json:"nodes"`
	Focus   string    `json:"focus"`
	Skip    string    `json:"skip"`
}

// ProxyRun is one configuration's part of the run.
type ProxyRun struct {
	// Name is the configuration (bench/cluster/proxies.Config.Name).
	Name string `json:"name"`
	// NotRun says why the configuration was not run (the kernel lacks
	// what it needs); Error why its run stopped short. Either leaves
	// Specs empty or partial.
	NotRun string `json:"notRun,omitempty"`
	Error  string `json:"error,omitempty"`
	// Seconds is the whole configuration's time: the swap to it and its
	// specs.
	Seconds float64    `json:"seconds"`
	Specs   []SpecJSON `json:"specs,omitempty"`
}

// SpecJSON is a Spec as the report stores it.
type SpecJSON struct {
	Name    string  `json:"name"`
	Result  Result  `json:"result"`
	Seconds float64 `json:"seconds"`
	Message string  `json:"message,omitempty"`
}

// SpecsJSON converts a run's specs for the report.
func SpecsJSON(specs []Spec) []SpecJSON {
	out := make([]SpecJSON, len(specs))
	for i, s := range specs {
		out[i] = SpecJSON{Name: s.Name, Result: s.Result, Seconds: s.Duration.Seconds(), Message: s.Message}
	}
	return out
}

// WriteJSON writes the report to path.
func (r Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the report: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// ReadReport reads a report WriteJSON wrote, refusing another schema.
func ReadReport(path string) (Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Report{}, fmt.Errorf("reading the report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return Report{}, fmt.Errorf("%s: %w", path, err)
	}
	if r.Schema != SchemaVersion {
		return Report{}, fmt.Errorf("%s: schema version %d, want %d", path, r.Schema, SchemaVersion)
	}
	return r, nil
}

// specNames lists every spec any configuration reached, sorted.
func (r Report) specNames() []string {
	seen := map[string]bool{}
	for _, p := range r.Proxies {
		for _, s := range p.Specs {
			seen[s.Name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// result is spec's result under p, "" when p did not reach it.
func (p ProxyRun) result(spec string) (SpecJSON, bool) {
	for _, s := range p.Specs {
		if s.Name == spec {
			return s, true
		}
	}
	return SpecJSON{}, false
}

// counts tallies p's results.
func (p ProxyRun) counts() map[Result]int {
	c := map[Result]int{}
	for _, s := range p.Specs {
		c[s.Result]++
	}
	return c
}

// Failed reports whether any configuration failed a spec or stopped short.
func (r Report) Failed() bool {
	for _, p := range r.Proxies {
		if p.Error != "" || p.counts()[Failed] > 0 {
			return true
		}
	}
	return false
}

// Markdown renders the report: the header, one line per configuration,
// the table of specs × configurations, and each failure's message.
func (r Report) Markdown() string {
	var b strings.Builder
	h := r.Header
	b.WriteString("## Upstream's sig-network specs against kproxy and kube-proxy\n\n")
	fmt.Fprintf(&b, "- date: %s\n", h.Date.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- machine: Linux %s, %d cores; %d nodes (network namespaces)\n", h.Kernel, h.Cores, h.Nodes)
	fmt.Fprintf(&b, "- commit: %s\n", h.Commit)
	fmt.Fprintf(&b, "- command: `%s`\n", h.Command)
	fmt.Fprintf(&b, "- focus: `%s`; skip: `%s`\n\n", h.Focus, h.Skip)

	b.WriteString("| Configuration | Passed | Failed | Skipped | Time | Note |\n|---|---|---|---|---|---|\n")
	for _, p := range r.Proxies {
		c := p.counts()
		note := p.NotRun
		if p.Error != "" {
			note = "stopped: " + p.Error
		}
		if p.NotRun != "" {
			fmt.Fprintf(&b, "| %s | – | – | – | – | %s |\n", p.Name, cell(note))
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s |\n", p.Name, c[Passed], c[Failed], c[Skipped],
			(time.Duration(p.Seconds) * time.Second).String(), cell(note))
	}

	b.WriteString("\n| Spec |")
	for _, p := range r.Proxies {
		fmt.Fprintf(&b, " %s |", p.Name)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(r.Proxies)) + "\n")
	for _, name := range r.specNames() {
		fmt.Fprintf(&b, "| %s |", cell(shortName(name)))
		for _, p := range r.Proxies {
			fmt.Fprintf(&b, " %s |", mark(p, name))
		}
		b.WriteString("\n")
	}

	var notes strings.Builder
	for _, p := range r.Proxies {
		for _, s := range p.Specs {
			if s.Result != Passed {
				fmt.Fprintf(&notes, "- %s, %s: %s: %s\n", p.Name, shortName(s.Name), s.Result, s.Message)
			}
		}
	}
	if notes.Len() > 0 {
		b.WriteString("\nWhy a spec failed or skipped itself (the first line of its message):\n\n" + notes.String())
	}
	return b.String()
}

// mark is a table cell: the result, or why there is none.
func mark(p ProxyRun, spec string) string {
	if p.NotRun != "" {
		return "not run"
	}
	s, ok := p.result(spec)
	switch {
	case !ok:
		return "–"
	case s.Result == Failed:
		return "**failed**"
	default:
		return string(s.Result)
	}
}

// shortName drops the prefix every selected spec shares.
func shortName(spec string) string {
	return strings.TrimPrefix(spec, "[sig-network] ")
}

// Merge joins reports of one selection of specs (equal focus, skip and
// node count) that were run apart, for example one configuration at a
// time, into one table: every configuration in the order first seen, a
// configuration run twice by its later run. The header is the latest
// report's, with the commits and commands of all of them.
func Merge(reports ...Report) (Report, error) {
	if len(reports) == 0 {
		return Report{}, errors.New("no report to merge")
	}
	latest := slices.MaxFunc(reports, func(a, b Report) int { return a.Header.Date.Compare(b.Header.Date) })
	out := Report{Schema: SchemaVersion, Header: latest.Header}
	var commits, commands []string
	at := map[string]int{}
	for _, r := range slices.SortedStableFunc(slices.Values(reports), func(a, b Report) int { return a.Header.Date.Compare(b.Header.Date) }) {
		h := r.Header
		if h.Focus != latest.Header.Focus || h.Skip != latest.Header.Skip || h.Nodes != latest.Header.Nodes {
			return Report{}, fmt.Errorf("the run of %s selected other specs or nodes (focus %q, skip %q, %d nodes) than that of %s (%q, %q, %d)",
				h.Date.UTC().Format(time.RFC3339), h.Focus, h.Skip, h.Nodes,
				latest.Header.Date.UTC().Format(time.RFC3339), latest.Header.Focus, latest.Header.Skip, latest.Header.Nodes)
		}
		if !slices.Contains(commits, h.Commit) {
			commits = append(commits, h.Commit)
		}
		commands = append(commands, fmt.Sprintf("%s (%s)", h.Command, h.Date.UTC().Format("15:04 UTC")))
		for _, p := range r.Proxies {
			if i, ok := at[p.Name]; ok {
				out.Proxies[i] = p
				continue
			}
			at[p.Name] = len(out.Proxies)
			out.Proxies = append(out.Proxies, p)
		}
	}
	out.Header.Commit = strings.Join(commits, ", ")
	out.Header.Command = strings.Join(commands, "`, then `")
	return out, nil
}
