package sysctl_test

import (
	"errors"
	"syscall"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/sysctl"
	"kproxy.dev/kproxy/sync/sysctl/fakesysctl"
)

// The contract of Sysctls: every step runs on the fake, and in a fresh
// network namespace on /proc/sys as well, where both must answer alike.

const (
	ipForward = "net/ipv4/ip_forward"
	portRange = "net/ipv4/ip_local_port_range"
	// Read-only outside the initial network namespace.
	conntrackMax = "net/netfilter/nf_conntrack_max"
)

// freshNetns is the fake set up as a new network namespace's /proc/sys.
func freshNetns() *fakesysctl.Sysctls {
	f := fakesysctl.New(map[string]string{ipForward: "0", portRange: "32768\t60999\n", conntrackMax: "262144"})
	f.FailWrites(conntrackMax, syscall.EACCES)
	return f
}

type step struct {
	name   string
	write  bool
	sysctl string
	value  string // written, or read (anyValue: whatever it is)

	wantErr syscall.Errno
	wantMsg string // the error's text
}

const anyValue = "\x00any"

func steps() []step {
	return []step{
		{name: "read a namespaced sysctl", sysctl: ipForward, value: "0"},
		{name: "write it", write: true, sysctl: ipForward, value: "1"},
		{name: "read it back", sysctl: ipForward, value: "1"},
		{name: "white space around a value is trimmed, inside kept", sysctl: portRange, value: "32768\t60999"},
		{name: "read a sysctl read-only in a namespace", sysctl: conntrackMax, value: anyValue},
		{name: "writing it is refused, naming it", write: true, sysctl: conntrackMax, value: "524288",
			wantErr: syscall.EACCES, wantMsg: "writing sysctl net/netfilter/nf_conntrack_max=524288: permission denied"},
		{name: "read an unknown sysctl", sysctl: "net/ipv4/no_such_sysctl",
			wantErr: syscall.ENOENT, wantMsg: "reading sysctl net/ipv4/no_such_sysctl: no such file or directory"},
		{name: "write an unknown sysctl", write: true, sysctl: "net/ipv4/no_such_sysctl", value: "1",
			wantErr: syscall.ENOENT, wantMsg: "writing sysctl net/ipv4/no_such_sysctl=1: no such file or directory"},
		{name: "a name cannot climb out", sysctl: "net/../../../etc/hostname", wantErr: syscall.EINVAL},
		{name: "nor write out", write: true, sysctl: "../escape", value: "1", wantErr: syscall.EINVAL},
		{name: "a path is not a name", sysctl: "/proc/sys/" + ipForward, wantErr: syscall.EINVAL},
		{name: "nor is a dotted name", sysctl: "net.ipv4.ip_forward", wantErr: syscall.ENOENT},
		{name: "nor the root", sysctl: ".", wantErr: syscall.EINVAL},
		{name: "nor nothing", sysctl: "", wantErr: syscall.EINVAL},
	}
}

// runContract runs the steps on each impl in turn, in order.
func runContract(t *testing.T, impls map[string]sysctl.Sysctls) {
	for implName, s := range impls {
		for _, st := range steps() {
			t.Run(implName+"/"+st.name, func(t *testing.T) {
				var got string
				var err error
				if st.write {
					err = s.Write(st.sysctl, st.value)
				} else {
					got, err = s.Read(st.sysctl)
				}
				if st.wantErr != 0 {
					var se *sysctl.Error
					switch {
					case !errors.Is(err, st.wantErr):
						t.Fatalf("error %v, want %v", err, st.wantErr)
					case !errors.As(err, &se) || se.Name != st.sysctl:
						t.Errorf("error %#v is not a *sysctl.Error naming %q", err, st.sysctl)
					case st.wantMsg != "" && err.Error() != st.wantMsg:
						t.Errorf("error %q, want %q", err, st.wantMsg)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if !st.write && st.value != anyValue && got != st.value {
					t.Errorf("Read(%s) = %q, want %q", st.sysctl, got, st.value)
				}
			})
		}
	}
}

func TestContract(t *testing.T) {
	runContract(t, map[string]sysctl.Sysctls{"fake": freshNetns()})
}

func TestContractKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	if _, err := (sysctl.Proc{}).Read(conntrackMax); err != nil {
		t.Skipf("no conntrack sysctls (nf_conntrack not loaded?): %v", err)
	}
	runContract(t, map[string]sysctl.Sysctls{"fake": freshNetns(), "kernel": sysctl.Proc{}})
}
