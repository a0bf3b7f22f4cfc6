package nftables

import (
	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
)

// TableName is the table kproxy writes in the ip and ip6 families: the one
// kube-proxy's nftables mode writes, so either can take over from the other.
const TableName = "kube-proxy"

// Definition is the nftables mode for the registry. It is not picked
// automatically: kube-proxy's default stays iptables.
func Definition() contract.Definition {
	return contract.Definition{
		Name:        mode.NFTables,
		Missing:     Missing,
		SyncPeriods: func(s contract.Settings) contract.SyncPeriods { return s.NFTables.Sync },
		Conntrack:   conntrack.KernelNAT,
		Owned:       Owned,
		New:         build,
	}
}

// Missing lists what the nftables mode needs that f lacks: the nft tool
// (1.0.1 or later), kernel 5.13 or later and an ip-family nf_tables table.
func Missing(f kernel.Features) []string {
	if s := f.NFTables.Family(ipfamily.IPv4); !s.Present {
		return []string{kernel.WithDetail("nftables", s.Detail)}
	}
	return nil
}

// Owned is the mode's table in both families.
func Owned() owned.Objects {
	return owned.Objects{NFTables: []string{TableName}}
}
