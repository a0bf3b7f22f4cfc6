package kernel

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// ProbeNFTable is the table the nf_tables probe creates and deletes again
// in one nft transaction, so even a probe run in the node's own namespace
// leaves nothing behind.
const ProbeNFTable = "kproxy-probe"

// NFTablesMinKernel and NFTablesMinNFT are what kube-proxy's nftables mode
// requires: kernel 5.13 (so that the host's own nft understands the rules
// kube-proxy writes) and nft 1.0.1 (older ones parse the whole ruleset).
var (
	NFTablesMinKernel = [2]int{5, 13}
	NFTablesMinNFT    = [3]int{1, 0, 1}
)

// SkipNFTablesKernelCheckEnv is kube-proxy's escape hatch for the kernel
// version check; kproxy honours it too.
const SkipNFTablesKernelCheckEnv = "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK"

// NFTablesSupport is what the nftables mode needs: the nft tool, a recent
// enough kernel, and nf_tables tables of each family.
type NFTablesSupport struct {
	// IPv4 and IPv6: a table of the ip (ip6) family can be created.
	IPv4, IPv6 Support
	// NFTVersion is `nft --version`'s version ("" when nft is missing).
	NFTVersion string
	// Problem says what rules the mode out on every family ("" when
	// nothing does): nft missing or too old, kernel too old.
	Problem string
}

// Family says whether the nftables mode can program fam's table, and if
// not, why.
func (n NFTablesSupport) Family(fam ipfamily.Family) Support {
	if n.Problem != "" {
		return Support{Detail: n.Problem}
	}
	if fam == ipfamily.IPv6 {
		return n.IPv6
	}
	return n.IPv4
}

func (n NFTablesSupport) String() string {
	if n.Problem != "" {
		return "absent (" + n.Problem + ")"
	}
	return fmt.Sprintf("nft %s, ip %s, ip6 %s", n.NFTVersion, n.IPv4, n.IPv6)
}

var nftVersionRE = regexp.MustCompile(`v(\d+)\.(\d+)(?:\.(\d+))?`)

// probeNFTVersion reads the nft tool's version; it runs in the node's
// namespace and changes nothing.
func (d *Detector) probeNFTVersion(ctx context.Context) (string, string) {
	out, err := d.Runner.Run(ctx, nil, "nft", "--version")
	if err != nil {
		return "", "the nft tool is needed: " + describe(err)
	}
	m := nftVersionRE.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Sprintf("cannot read the nft version from %q", strings.TrimSpace(string(out)))
	}
	v := [3]int{atoi(m[1]), atoi(m[2]), atoi(m[3])}
	version := fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
	if compareVersions(v[:], NFTablesMinNFT[:]) < 0 {
		return version, fmt.Sprintf("nft %s is too old: the nftables mode needs nft %d.%d.%d or later",
			version, NFTablesMinNFT[0], NFTablesMinNFT[1], NFTablesMinNFT[2])
	}
	return version, ""
}

// kernelTooOld says why the kernel release rules out the nftables mode ("" when it
// does not), as kube-proxy checks it.
func kernelTooOld(release string, skip bool) string {
	if skip {
		return ""
	}
	m := regexp.MustCompile(`^(\d+)\.(\d+)`).FindStringSubmatch(release)
	if m == nil {
		return fmt.Sprintf("cannot read the kernel version from %q (set %s=1 to skip the check)", release, SkipNFTablesKernelCheckEnv)
	}
	if compareVersions([]int{atoi(m[1]), atoi(m[2])}, NFTablesMinKernel[:]) < 0 {
		return fmt.Sprintf("kernel %s is too old: the nftables mode needs %d.%d or later, as kube-proxy's does (set %s=1 to skip the check)",
			release, NFTablesMinKernel[0], NFTablesMinKernel[1], SkipNFTablesKernelCheckEnv)
	}
	return ""
}

// probeNFTable creates and deletes a table of family ("ip" or "ip6") in
// one nft transaction.
func (d *Detector) probeNFTable(ctx context.Context, family string) Support {
	script := fmt.Sprintf("add table %s %s\ndelete table %s %s\n", family, ProbeNFTable, family, ProbeNFTable)
	if _, err := d.Runner.Run(ctx, []byte(script), "nft", "-f", "-"); err != nil {
		return Support{Detail: fmt.Sprintf("creating an nftables table of family %s: %s", family, describe(err))}
	}
	return Support{Present: true}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func compareVersions(a, b []int) int {
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			if i >= len(b) || a[i] > b[i] {
				return 1
			}
			return -1
		}
	}
	return 0
}

// skipNFTablesKernelCheck reads kube-proxy's environment switch.
func skipNFTablesKernelCheck() bool { return os.Getenv(SkipNFTablesKernelCheckEnv) != "" }
