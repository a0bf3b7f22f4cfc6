package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// TestHelpNamesEveryMode: wherever kproxy's --help speaks of the proxy
// modes (the overview, --proxy-mode, --cleanup), it names all four, so
// nftables is not missing from the list an operator reads.
func TestHelpNamesEveryMode(t *testing.T) {
	out, err := exec.Command(lab.KproxyBinary(t), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("kproxy --help: %v\n%s", err, out)
	}
	help := string(out)
	overview, _, _ := strings.Cut(help, "Usage:")
	tests := []struct {
		name string
		text string
	}{
		{"overview", overview},
		{"--proxy-mode", flagHelp(t, help, "proxy-mode")},
		{"--cleanup", flagHelp(t, help, "cleanup")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []string{"userspace", "iptables", "ipvs", "nftables"} {
				if !regexp.MustCompile(`\b` + mode + `\b`).MatchString(tc.text) {
					t.Errorf("the %s help does not name the %s mode:\n%s", tc.name, mode, tc.text)
				}
			}
		})
	}
}

// flagHelp returns the --help line (with its continuation lines) of a flag.
func flagHelp(t *testing.T, help, flag string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s+--` + regexp.QuoteMeta(flag) + `\b.*(\n\s{20,}\S.*)*`)
	m := re.FindString(help)
	if m == "" {
		t.Fatalf("--help lists no --%s:\n%s", flag, help)
	}
	return m
}
