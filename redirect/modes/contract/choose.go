package contract

import (
	"fmt"
	"strings"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/mode"
)

// Choose picks the mode to run among defs (in registry order). requested is
// the --proxy-mode value; "" means automatic: the first Auto mode that can
// run. reason says why, for the log. The error, when a mode cannot run,
// names every missing kernel feature and the modes that would work instead.
func Choose(requested string, f kernel.Features, defs []Definition) (Definition, string, error) {
	req := mode.Name(strings.ToLower(strings.TrimSpace(requested)))
	if req == "" {
		return chooseAuto(f, defs)
	}
	def, ok := find(defs, req)
	if !ok {
		return Definition{}, "", fmt.Errorf("unknown --proxy-mode %q: want one of %s (or empty for automatic)", requested, strings.Join(names(defs), ", "))
	}
	missing := def.Missing(f)
	if len(missing) == 0 {
		return def, fmt.Sprintf("--proxy-mode=%s was requested and this kernel supports it (iptables backend %s: %s)", req, f.Backend, f.BackendReason), nil
	}
	return Definition{}, "", fmt.Errorf("--proxy-mode=%s cannot run on this kernel: %s; %s", req, joinAnd(missing), alternatives(req, f, defs))
}

func chooseAuto(f kernel.Features, defs []Definition) (Definition, string, error) {
	var refused []string
	for _, def := range defs {
		if !def.Auto {
			continue
		}
		missing := def.Missing(f)
		if len(missing) > 0 {
			refused = append(refused, fmt.Sprintf("%s mode needs what is missing: %s", def.Name, joinAnd(missing)))
			continue
		}
		if len(refused) == 0 {
			return def, fmt.Sprintf("no --proxy-mode given; %s mode runs here (iptables backend %s: %s)", def.Name, f.Backend, f.BackendReason), nil
		}
		return def, fmt.Sprintf("no --proxy-mode given; %s, so falling back to %s", strings.Join(refused, "; "), def.Name), nil
	}
	return Definition{}, "", fmt.Errorf("no proxy mode can run on this kernel: %s", strings.Join(refused, "; "))
}

func find(defs []Definition, name mode.Name) (Definition, bool) {
	for _, d := range defs {
		if d.Name == name {
			return d, true
		}
	}
	return Definition{}, false
}

func names(defs []Definition) []string {
	var out []string
	for _, d := range defs {
		out = append(out, string(d.Name))
	}
	return out
}

// alternatives names the other modes that would run on f.
func alternatives(req mode.Name, f kernel.Features, defs []Definition) string {
	var ok []string
	for _, d := range defs {
		if d.Name != req && len(d.Missing(f)) == 0 {
			ok = append(ok, "--proxy-mode="+string(d.Name))
		}
	}
	switch len(ok) {
	case 0:
		return "no other proxy mode would work here either"
	case 1:
		return ok[0] + " would work here"
	default:
		return strings.Join(ok, " or ") + " would work here"
	}
}

// joinAnd joins phrases as "a, b, and c" ("a, and b" for two, matching the
// comma the phrases' own parentheses need).
func joinAnd(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + ", and " + parts[len(parts)-1]
}
