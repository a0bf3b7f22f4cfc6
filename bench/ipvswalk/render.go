package ipvswalk

import (
	"context"
	"fmt"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// renderDump writes the state's iptables layer into an empty fake iptables
// as the mode does (one --noflush restore of the layer, then the jumps,
// each inserted first) and returns the fake's iptables-save dump.
func renderDump(st *desired.State) (string, error) {
	fake := fakeiptables.New(st.Family)
	tool := "iptables-restore"
	if st.Family == ipfamily.IPv6 {
		tool = "ip6tables-restore"
	}
	payload := desired.RenderTables(st.Tables)
	if _, err := fake.Run(context.Background(), []byte(payload), tool, "--noflush"); err != nil {
		return "", fmt.Errorf("restoring the iptables layer: %w", err)
	}
	jumps, err := desired.RestoreJumps(st.Jumps)
	if err != nil {
		return "", err
	}
	runner, err := restore.NewRunner(st.Family, kernel.NFT, fake)
	if err != nil {
		return "", err
	}
	if _, err := runner.EnsureJumps(context.Background(), jumps); err != nil {
		return "", fmt.Errorf("inserting the jumps into the iptables layer: %w", err)
	}
	return fake.Save(""), nil
}
