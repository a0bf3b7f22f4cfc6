package kernel

import (
	"os"
	"testing"

	"kproxy.dev/kproxy/redirect/kernel/sysctl/fakesysctl"
)

func TestIPv6Off(t *testing.T) {
	if _, err := os.Stat("/proc/net/if_inet6"); err != nil {
		t.Skipf("this kernel has no IPv6: %v", err)
	}
	tests := []struct {
		name    string
		sysctls map[string]string
		wantOff bool
	}{
		{"enabled", map[string]string{"net/ipv6/conf/all/disable_ipv6": "0"}, false},
		{"disabled by sysctl", map[string]string{"net/ipv6/conf/all/disable_ipv6": "1\n"}, true},
		{"an unreadable sysctl does not disable it", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NetlinkSystem{Sysctls: fakesysctl.New(tt.sysctls)}.IPv6Off()
			if (err != nil) != tt.wantOff {
				t.Errorf("IPv6Off() = %v, want off: %v", err, tt.wantOff)
			}
		})
	}
}
