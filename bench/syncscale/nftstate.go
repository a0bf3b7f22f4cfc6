package syncscale

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"os/exec"
	"strings"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/servicemap"
)

// NFTTable is the table both proxies' nftables mode writes, in the ip and
// ip6 families; the rows are IPv4 only, so the ip one is inspected.
const NFTTable = "kube-proxy"

// nftChainBase is kube-proxy's nftables chain name stem: eight base32
// characters of the name's SHA-256, a hyphen, the name (never truncated
// for this benchmark's short names).
func nftChainBase(name string) string {
	sum := sha256.Sum256([]byte(name))
	return base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + name
}

func nftPortName(name servicemap.ServicePortName) string {
	return fmt.Sprintf("%s/%s/%s/%s", name.Namespace, name.Name, strings.ToLower(string(name.Protocol)), name.Port)
}

// NFTServiceChain is the nftables mode's chain for a service port's
// cluster traffic ("service-HASH-ns/name/tcp/port").
func NFTServiceChain(name servicemap.ServicePortName) string {
	return "service-" + nftChainBase(nftPortName(name))
}

// NFTStats summarises `nft list table ip kube-proxy`.
type NFTStats struct {
	// Rules counts rules in the table's chains; ServiceChains the
	// service-… chains (one per service port with endpoints).
	Rules, Chains, ServiceChains int
	Bytes                        int
}

// ParseNFTTable summarises one table's `nft list table` output. A chain's
// rules are the lines one level into its block, other than its type,
// policy and comment; deeper lines continue a rule.
func ParseNFTTable(text string) NFTStats {
	st := NFTStats{Bytes: len(text)}
	inChain := false
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSpace(line)
		depth := len(line) - len(strings.TrimLeft(line, "\t"))
		switch {
		case depth == 1 && strings.HasPrefix(trimmed, "chain "):
			inChain = true
			st.Chains++
			if strings.HasPrefix(trimmed, "chain service-") {
				st.ServiceChains++
			}
		case depth == 1 && trimmed == "}":
			inChain = false
		case inChain && depth == 2 && trimmed != "" && trimmed != "}":
			if strings.HasPrefix(trimmed, "type ") || strings.HasPrefix(trimmed, "policy ") || strings.HasPrefix(trimmed, "comment ") {
				continue
			}
			st.Rules++
		}
	}
	return st
}

// NFTDump lists the ip kube-proxy table and returns its summary and text.
func NFTDump(ctx context.Context) (NFTStats, string, error) {
	out, err := exec.CommandContext(ctx, "nft", "list", "table", "ip", NFTTable).Output()
	if err != nil {
		return NFTStats{}, "", fmt.Errorf("nft list table ip %s: %w%s", NFTTable, err, stderrOf(err))
	}
	return ParseNFTTable(string(out)), string(out), nil
}

// NFTListChain lists one chain of the ip kube-proxy table.
func NFTListChain(ctx context.Context, chain string) (string, error) {
	out, err := exec.CommandContext(ctx, "nft", "list", "chain", "ip", NFTTable, chain).Output()
	if err != nil {
		return "", fmt.Errorf("nft list chain ip %s %s: %w%s", NFTTable, chain, err, stderrOf(err))
	}
	return string(out), nil
}

// NFTTables lists the nftables tables of the namespace ("ip kube-proxy", …).
func NFTTables(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "nft", "list", "tables").Output()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w%s", err, stderrOf(err))
	}
	var tables []string
	for line := range strings.Lines(string(out)) {
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "table "); ok {
			tables = append(tables, t)
		}
	}
	return tables, nil
}

// hasKubeProxyTable says whether tables (from NFTTables) hold either
// family's kube-proxy table.
func hasKubeProxyTable(tables []string) bool {
	for _, t := range tables {
		if t == "ip "+NFTTable || t == "ip6 "+NFTTable {
			return true
		}
	}
	return false
}

// VerifyNFTables checks that the nftables mode's rules for n services are
// in the ip kube-proxy table, and that neither iptables backend holds proxy
// rules. It returns the table's summary and text.
func VerifyNFTables(ctx context.Context, n int) (NFTStats, string, error) {
	st, text, err := NFTDump(ctx)
	if err != nil {
		return st, "", err
	}
	if st.ServiceChains < n {
		return st, text, fmt.Errorf("table ip %s has %d service chains, want at least %d (one per service)", NFTTable, st.ServiceChains, n)
	}
	for _, b := range kernel.Backends() {
		d, _, err := SaveDump(ctx, b)
		if err != nil {
			return st, text, err
		}
		if lines := d.ProxyLines(); lines > 0 {
			return st, text, fmt.Errorf("iptables-%s-save shows %d proxy rule lines, but this row's proxies run the nftables mode", b, lines)
		}
	}
	return st, text, nil
}
