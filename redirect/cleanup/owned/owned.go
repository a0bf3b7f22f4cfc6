// Package owned describes the kernel objects a proxy mode creates: each mode
// exports its own list, and cleanup (--cleanup, or a node switching modes)
// removes what the other modes own. It is a leaf so that modes and cleanup
// can both use it without importing each other.
package owned

import "strings"

// Chain is an iptables chain, or with Prefix every chain whose name starts
// with Name, in Table ("*": any table).
type Chain struct {
	Table  string
	Name   string
	Prefix bool
}

// ChainsIn lists the chains names in table.
func ChainsIn(table string, names ...string) []Chain {
	return chainsIn(table, false, names)
}

// PrefixesIn lists, in table, every chain whose name starts with one of
// prefixes.
func PrefixesIn(table string, prefixes ...string) []Chain {
	return chainsIn(table, true, prefixes)
}

func chainsIn(table string, prefix bool, names []string) []Chain {
	out := make([]Chain, len(names))
	for i, name := range names {
		out[i] = Chain{Table: table, Name: name, Prefix: prefix}
	}
	return out
}

// Set is an ipset name, or with Prefix every set whose name starts with Name.
type Set struct {
	Name   string
	Prefix bool
}

// Objects are what one mode creates in the kernel.
type Objects struct {
	Chains []Chain
	Sets   []Set
	// IPVSLink, when set, is the dummy link the mode binds IPVS virtual
	// server addresses to: the link goes, and with it every IPVS virtual
	// server (the link is the evidence they are the mode's).
	IPVSLink string
	// NFTables are nftables tables (in the ip and ip6 families).
	NFTables []string
	// LocalRoutes: the mode makes service addresses local with routes of
	// redirect/localroute's protocol, and replies local with policy rules
	// and a table of redirect/replyroute's (the same protocol), which all
	// go.
	LocalRoutes bool
}

// HasChain says whether chain in table is one of o's.
func (o Objects) HasChain(table, chain string) bool {
	for _, c := range o.Chains {
		if c.Table != table && c.Table != "*" {
			continue
		}
		if chain == c.Name || (c.Prefix && strings.HasPrefix(chain, c.Name)) {
			return true
		}
	}
	return false
}

// HasSet says whether the ipset name is one of o's.
func (o Objects) HasSet(name string) bool {
	for _, s := range o.Sets {
		if name == s.Name || (s.Prefix && strings.HasPrefix(name, s.Name)) {
			return true
		}
	}
	return false
}

// HasNFTable says whether the nftables table name is one of o's.
func (o Objects) HasNFTable(name string) bool {
	for _, t := range o.NFTables {
		if t == name {
			return true
		}
	}
	return false
}

// Merge returns the objects of all of os.
func Merge(os ...Objects) Objects {
	var out Objects
	for _, o := range os {
		out.Chains = append(out.Chains, o.Chains...)
		out.Sets = append(out.Sets, o.Sets...)
		if o.IPVSLink != "" {
			out.IPVSLink = o.IPVSLink
		}
		out.NFTables = append(out.NFTables, o.NFTables...)
		out.LocalRoutes = out.LocalRoutes || o.LocalRoutes
	}
	return out
}
