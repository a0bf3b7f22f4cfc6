package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// modulesDisabled is the one-way switch that stops the kernel loading
// modules, on request (modprobe) or on demand (iptables asking for a table).
const modulesDisabled = "/proc/sys/kernel/modules_disabled"

// netfilterProcFiles exist only while a netfilter module is loaded.
var netfilterProcFiles = []string{
	"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names", "/proc/net/nf_conntrack", "/proc/net/ip_vs",
}

// natTools are asked for the nat table, which must fail: each that is
// installed tries its own way in (legacy setsockopt, nf_tables netlink).
var natTools = []string{
	"iptables", "iptables-legacy", "iptables-nft", "ip6tables", "ip6tables-legacy", "ip6tables-nft",
}

// natToolTimeout bounds one iptables run (guest syscalls are slow).
const natToolTimeout = 30 * time.Second

// withoutNetfilter turns module loading off and checks that the guest has
// no netfilter: no module, no table a tool can use.
func withoutNetfilter() error {
	if err := os.WriteFile(modulesDisabled, []byte("1\n"), 0); err != nil {
		return fmt.Errorf("disabling module loading: %w", err)
	}
	// The tools first: had they loaded a module, the checks below see it.
	errs := []error{natTableUnusable()}
	mods, err := LoadedNetfilterModules()
	if err != nil {
		errs = append(errs, err)
	} else if len(mods) > 0 {
		errs = append(errs, fmt.Errorf("netfilter modules loaded: %s", strings.Join(mods, " ")))
	}
	for _, f := range netfilterProcFiles {
		if _, err := os.Stat(f); err == nil {
			errs = append(errs, fmt.Errorf("%s exists", f))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("the guest was to run without netfilter, but: %w", err)
	}
	return nil
}

// natTableUnusable runs `TOOL -t nat -S` for each installed tool of
// natTools and fails for any that succeeds.
func natTableUnusable() error {
	var errs []error
	ran := 0
	for _, tool := range natTools {
		path, err := exec.LookPath(tool)
		if err != nil {
			continue
		}
		ran++
		ctx, cancel := context.WithTimeout(context.Background(), natToolTimeout)
		out, err := exec.CommandContext(ctx, path, "-t", "nat", "-S").CombinedOutput()
		cancel()
		if err == nil {
			errs = append(errs, fmt.Errorf("`%s -t nat -S` works:\n%s", tool, strings.TrimSpace(string(out))))
		}
	}
	if ran == 0 {
		errs = append(errs, fmt.Errorf("none of %s is installed to show the nat table is unusable", strings.Join(natTools, ", ")))
	}
	return errors.Join(errs...)
}
