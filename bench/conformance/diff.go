package conformance

import (
	"fmt"
	"strings"
)

// Change is one spec whose result under one configuration differs between
// two runs; an empty result is a spec the run did not reach (or a
// configuration it did not take).
type Change struct {
	Proxy, Spec string
	Old, New    Result
}

// Compare lists the specs that changed result between two runs, per
// configuration, in new's configuration order and spec order (those only
// in old after them). A configuration only one run took shows as every
// one of its specs appearing or disappearing.
func Compare(old, new Report) []Change {
	var changes []Change
	proxies := map[string]bool{}
	var order []string
	for _, r := range []Report{new, old} {
		for _, p := range r.Proxies {
			if !proxies[p.Name] {
				proxies[p.Name] = true
				order = append(order, p.Name)
			}
		}
	}
	specs := Report{Proxies: append(append([]ProxyRun{}, new.Proxies...), old.Proxies...)}.specNames()
	for _, proxy := range order {
		o, n := runNamed(old, proxy), runNamed(new, proxy)
		for _, spec := range specs {
			or, nr := resultOf(o, spec), resultOf(n, spec)
			if or != nr {
				changes = append(changes, Change{Proxy: proxy, Spec: spec, Old: or, New: nr})
			}
		}
	}
	return changes
}

func runNamed(r Report, name string) ProxyRun {
	for _, p := range r.Proxies {
		if p.Name == name {
			return p
		}
	}
	return ProxyRun{}
}

func resultOf(p ProxyRun, spec string) Result {
	s, ok := p.result(spec)
	if !ok {
		return ""
	}
	return s.Result
}

// RenderChanges prints changes one a line, or says that none changed.
func RenderChanges(changes []Change) string {
	if len(changes) == 0 {
		return "No spec changed result.\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d spec results changed:\n", len(changes))
	for _, c := range changes {
		fmt.Fprintf(&b, "  %s: %s: %s → %s\n", c.Proxy, shortName(c.Spec), orAbsent(c.Old), orAbsent(c.New))
	}
	return b.String()
}

func orAbsent(r Result) string {
	if r == "" {
		return "(not run)"
	}
	return string(r)
}
