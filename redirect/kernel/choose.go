package kernel

import (
	"fmt"
	"strings"

	"kproxy.dev/kproxy/sync/mode"
)

// modeOrder is the order modes are offered as alternatives.
func modeOrder() []mode.Name { return []mode.Name{mode.IPTables, mode.IPVS, mode.Userspace} }

// Choose picks the proxy mode to run. requested is the --proxy-mode value; ""
// means automatic: iptables when this node can run it, else userspace. reason
// says why, for the log. The error, when a mode cannot run, names every
// missing kernel feature and the modes that would work instead.
func Choose(requested string, f Features) (mode.Name, string, error) {
	req := mode.Name(strings.ToLower(strings.TrimSpace(requested)))
	if req == "" {
		return chooseAuto(f)
	}
	if !known(req) {
		return "", "", fmt.Errorf("unknown --proxy-mode %q: want one of iptables, ipvs, userspace (or empty for automatic)", requested)
	}
	missing := Missing(req, f)
	if len(missing) == 0 {
		return req, fmt.Sprintf("--proxy-mode=%s was requested and this kernel supports it (iptables backend %s: %s)", req, f.Backend, f.BackendReason), nil
	}
	return "", "", fmt.Errorf("--proxy-mode=%s cannot run on this kernel: %s; %s", req, joinAnd(missing), alternatives(req, f))
}

func chooseAuto(f Features) (mode.Name, string, error) {
	ipt := Missing(mode.IPTables, f)
	if len(ipt) == 0 {
		return mode.IPTables, fmt.Sprintf("no --proxy-mode given; iptables mode runs here (iptables backend %s: %s)", f.Backend, f.BackendReason), nil
	}
	us := Missing(mode.Userspace, f)
	if len(us) == 0 {
		return mode.Userspace, fmt.Sprintf("no --proxy-mode given; iptables mode cannot run (%s), so falling back to userspace", joinAnd(ipt)), nil
	}
	return "", "", fmt.Errorf("no proxy mode can run on this kernel: iptables mode needs what is missing: %s; userspace mode needs what is missing: %s", joinAnd(ipt), joinAnd(us))
}

// Missing lists, as phrases for an error message, the kernel features mode m
// needs that f lacks. Empty means m can run.
func Missing(m mode.Name, f Features) []string {
	var missing []string
	ipt := f.Chosen(IPv4)
	noBackend := func() {
		missing = append(missing, "no iptables backend is usable ("+f.BackendReason+")")
	}
	switch m {
	case mode.IPTables:
		if f.Backend == "" {
			noBackend()
		} else if !ipt.DNAT {
			missing = append(missing, fmt.Sprintf("the nat table of iptables-%s cannot load the DNAT target (%s)", f.Backend, ipt.Problem))
		}
	case mode.Userspace:
		if f.Backend == "" {
			noBackend()
		} else if !ipt.Redirect && !ipt.DNAT {
			missing = append(missing, fmt.Sprintf("the nat table of iptables-%s can load neither the REDIRECT nor the DNAT target (%s)", f.Backend, ipt.Problem))
		}
	case mode.IPVS:
		if !f.IPVS.Present {
			missing = append(missing, withDetail("IPVS is absent", f.IPVS.Detail))
		}
		if !f.IPSet.Present {
			missing = append(missing, withDetail("ipset is unusable", f.IPSet.Detail))
		}
		if !f.DummyLinks.Present {
			missing = append(missing, "dummy links are not supported")
		}
		if f.Backend == "" {
			noBackend()
		}
	default:
		missing = append(missing, fmt.Sprintf("%q is not a proxy mode", m))
	}
	return missing
}

func known(m mode.Name) bool {
	for _, k := range modeOrder() {
		if k == m {
			return true
		}
	}
	return false
}

// alternatives names the other modes that would run on f.
func alternatives(req mode.Name, f Features) string {
	var ok []string
	for _, m := range modeOrder() {
		if m != req && len(Missing(m, f)) == 0 {
			ok = append(ok, "--proxy-mode="+string(m))
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

func withDetail(s, detail string) string {
	if detail == "" {
		return s
	}
	return s + " (" + detail + ")"
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
