package dataplane

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// ExtraEnv adds proxies to a run, for comparing variants of a relay in the
// same lab and the same run: "name=/path/to/binary[,name=/path/to/binary]".
// Each binary is started on the node with one RelaySpec argument per TCP
// service (iperf3 and HTTP, in that order; the format of
// RelaySpec.String), must relay TCP from each spec's listen address to its
// upstream, and is measured in every TCP row as a column of its own behind
// the same kind of REDIRECT rule as the io.Copy relay and HAProxy.
const ExtraEnv = "KPROXY_DATAPLANE_EXTRA"

// maxExtra bounds the extra proxies: each gets its own VIP and ports.
const maxExtra = 4

// ExtraProxy is one proxy named in ExtraEnv.
type ExtraProxy struct {
	Path   Path
	Binary string
}

// ParseExtra reads ExtraEnv's value; an empty value means no extra proxies.
func ParseExtra(s string) ([]ExtraProxy, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []ExtraProxy
	seen := map[Path]bool{}
	for _, item := range strings.Split(s, ",") {
		name, bin, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || bin == "" {
			return nil, fmt.Errorf("%s: %q is not name=/path/to/binary", ExtraEnv, item)
		}
		p := Path(name)
		if seen[p] || isStandardPath(p) {
			return nil, fmt.Errorf("%s: name %q is used twice or is a standard path", ExtraEnv, name)
		}
		if !filepath.IsAbs(bin) {
			return nil, fmt.Errorf("%s: %s: binary path %q must be absolute (proxies start in other directories)", ExtraEnv, name, bin)
		}
		seen[p] = true
		out = append(out, ExtraProxy{Path: p, Binary: bin})
	}
	if len(out) > maxExtra {
		return nil, fmt.Errorf("%s: %d proxies, at most %d", ExtraEnv, len(out), maxExtra)
	}
	return out, nil
}

func isStandardPath(p Path) bool {
	for _, s := range Paths() {
		if s == p {
			return true
		}
	}
	return false
}

// extraVIP and extraPorts place the i-th extra proxy: VIP 198.18.(5+i).1,
// proxy ports 7201+100i (iperf3) and 7202+100i (HTTP), clear of the
// standard paths' addresses and ports.
func extraVIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(5 + i), 1}) }

func extraPorts(i int) (iperf, http int) { return 7201 + 100*i, 7202 + 100*i }

// extraFromEnv reads ExtraEnv from the environment.
func extraFromEnv() ([]ExtraProxy, error) { return ParseExtra(os.Getenv(ExtraEnv)) }
