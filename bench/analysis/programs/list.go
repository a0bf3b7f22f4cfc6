// Package programs keeps kproxy's list of external programs honest: every
// program the product, its tests and its benchmarks execute must be listed in
// .ci/programs, which .ci/install-deps installs from, so a fresh machine gets
// all of them. Scan finds the programs the Go code runs; the package's tests
// compare them with the list and, under `make test`, check the list against
// what is installed. It lives in bench/analysis, a module of its own, so
// that golang.org/x/tools, which only the scan needs, stays out of kproxy's
// go.mod; the scan still loads kproxy's module from the repository root.
package programs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Source says where a listed program comes from.
type Source struct {
	Kind    string // "deb", "go", "tools", "cluster-tools", "conformance-tools" or "tree"
	Package string // the Debian package, for Kind "deb"
}

func (s Source) String() string {
	if s.Kind == "deb" {
		return "deb:" + s.Package
	}
	return s.Kind
}

// List maps a program name to where it comes from.
type List map[string]Source

// Programs returns the listed names, sorted.
func (l List) Programs() []string {
	out := make([]string, 0, len(l))
	for p := range l {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Load reads a program list file (see .ci/programs).
func Load(path string) (List, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the program list: %w", err)
	}
	defer f.Close()
	l, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// Parse reads lines of "program source", with # comments and blank lines.
func Parse(r io.Reader) (List, error) {
	l := List{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"program source\", got %q", n, strings.TrimSpace(line))
		}
		src, err := parseSource(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", n, f[0], err)
		}
		if prev, dup := l[f[0]]; dup {
			return nil, fmt.Errorf("line %d: %s listed twice (%s and %s)", n, f[0], prev, src)
		}
		l[f[0]] = src
	}
	return l, sc.Err()
}

func parseSource(s string) (Source, error) {
	switch {
	case strings.HasPrefix(s, "deb:") && len(s) > len("deb:"):
		return Source{Kind: "deb", Package: strings.TrimPrefix(s, "deb:")}, nil
	case s == "go", s == "tools", s == "cluster-tools", s == "conformance-tools", s == "tree":
		return Source{Kind: s}, nil
	}
	return Source{}, fmt.Errorf("unknown source %q (want deb:PACKAGE, go, tools, cluster-tools, conformance-tools or tree)", s)
}
