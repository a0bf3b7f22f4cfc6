package desired

import (
	"fmt"
	"strings"
)

// Dump renders a state as stable text for golden files and debugging:
// virtual servers in ipvsadm's spirit, addresses, non-empty sets, the
// iptables layer, jumps, sysctls and conflicts.
func Dump(st *State) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# family %s\n\n# virtual servers\n", st.Family)
	for _, s := range st.Services {
		sb.WriteString(DescribeVirtualServer(s.VirtualServer))
		if s.Bind {
			sb.WriteString(" bound")
		}
		fmt.Fprintf(&sb, " (%s)\n", s.Owner)
		for _, rs := range s.RealServers {
			fmt.Fprintf(&sb, "  -> %s weight %d\n", rs.AddrPort(), rs.Weight)
		}
	}
	sb.WriteString("\n# addresses on kube-ipvs0\n")
	for _, a := range st.Addresses {
		sb.WriteString(a.String() + "\n")
	}
	sb.WriteString("\n# sets (empty ones left out)\n")
	for _, set := range st.Sets {
		if len(set.Members) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "%s %s\n", set.Spec.Name, set.Spec.Type)
		for _, m := range set.Members {
			sb.WriteString("  " + m.String() + "\n")
		}
	}
	sb.WriteString("\n# iptables\n")
	sb.WriteString(RenderTables(st.Tables))
	sb.WriteString("\n# jumps from built-in chains (inserted first)\n")
	for _, j := range st.Jumps {
		fmt.Fprintf(&sb, "-t %s -A %s %s\n", j.Table, j.From, j.Rule)
	}
	sb.WriteString("\n# sysctls\n")
	for _, s := range st.Sysctls {
		fmt.Fprintf(&sb, "%s=%d\n", s.Name, s.Value)
	}
	if len(st.Conflicts) > 0 {
		sb.WriteString("\n# conflicts\n")
		for _, c := range st.Conflicts {
			fmt.Fprintf(&sb, "%s: kept by %s, wanted by %s\n", c.Key, c.Kept, c.Loser)
		}
	}
	return sb.String()
}

// DescribeVirtualServer renders "TCP 198.18.0.10:80 rr persistent 10800".
func DescribeVirtualServer(vs VirtualServer) string {
	s := fmt.Sprintf("%s %s %s", vs.Protocol, addrPort(vs.Key), vs.Scheduler)
	if vs.Flags&FlagPersistent != 0 {
		s += fmt.Sprintf(" persistent %d", vs.Timeout)
	}
	if other := vs.Flags &^ (FlagPersistent | FlagHashed); other != 0 {
		s += fmt.Sprintf(" flags %#x", other)
	}
	return s
}

func addrPort(k Key) string {
	if k.Addr.Is6() {
		return fmt.Sprintf("[%s]:%d", k.Addr, k.Port)
	}
	return fmt.Sprintf("%s:%d", k.Addr, k.Port)
}
