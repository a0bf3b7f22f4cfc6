package conntrack

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/sync/sysctl/fakesysctl"
)

// fakeKernel holds the sysctls and the hash size (their names never
// collide, so one fake serves as both, keeping the writes in order).
func fakeKernel(values map[string]string, readErrs, writeErrs map[string]syscall.Errno) (Params, *fakesysctl.Sysctls) {
	f := fakesysctl.New(values)
	for name, errno := range readErrs {
		f.FailReads(name, errno)
	}
	for name, errno := range writeErrs {
		f.FailWrites(name, errno)
	}
	return Params{Sysctls: f, Modules: f}, f
}

// shortWrites are f's writes without the parameters' directories.
func shortWrites(f *fakesysctl.Sysctls) []string {
	var out []string
	for _, w := range f.Writes() {
		out = append(out, strings.TrimPrefix(strings.TrimPrefix(w, "net/netfilter/"), "nf_conntrack/parameters/"))
	}
	return out
}

// kernelDefaults are a machine's values before tuning.
func kernelDefaults() map[string]string {
	return map[string]string{
		MaxSysctl: "65536", HashsizeParam: "16384",
		TCPEstablishedTimeoutSysctl: "432000", TCPCloseWaitTimeoutSysctl: "60", TCPBeLiberalSysctl: "0",
		UDPTimeoutSysctl: "30", UDPStreamTimeoutSysctl: "120",
	}
}

// kubeProxyDefaults are the flags' defaults.
var kubeProxyDefaults = Settings{MaxPerCore: 32768, Min: 131072, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour}

func TestTune(t *testing.T) {
	tests := []struct {
		name       string
		settings   Settings
		cpus       int
		values     map[string]string // nil: kernelDefaults
		readErrs   map[string]syscall.Errno
		writeErrs  map[string]syscall.Errno
		wantWrites []string
		wantErrs   []string // substrings, one per failed parameter
	}{
		{
			name:     "defaults on 2 CPUs: the minimum wins, the hash size follows",
			settings: kubeProxyDefaults, cpus: 2,
			wantWrites: []string{"nf_conntrack_max=131072", "hashsize=32768",
				"nf_conntrack_tcp_timeout_established=86400", "nf_conntrack_tcp_timeout_close_wait=3600"},
		},
		{
			name:     "defaults on 8 CPUs: per core wins",
			settings: kubeProxyDefaults, cpus: 8,
			wantWrites: []string{"nf_conntrack_max=262144", "hashsize=65536",
				"nf_conntrack_tcp_timeout_established=86400", "nf_conntrack_tcp_timeout_close_wait=3600"},
		},
		{
			name:     "a hash size already large enough is kept",
			settings: Settings{MaxPerCore: 32768, Min: 131072}, cpus: 2,
			values:     map[string]string{MaxSysctl: "65536", HashsizeParam: "262144"},
			wantWrites: []string{"nf_conntrack_max=131072"},
		},
		{
			name:     "values already in place are not written",
			settings: kubeProxyDefaults, cpus: 2,
			values: map[string]string{MaxSysctl: "131072", HashsizeParam: "32768",
				TCPEstablishedTimeoutSysctl: "86400", TCPCloseWaitTimeoutSysctl: "3600"},
		},
		{
			name:     "max per core 0 leaves the table size alone, whatever the minimum",
			settings: Settings{MaxPerCore: 0, Min: 131072}, cpus: 2,
		},
		{
			name:     "the optional settings, a sub-second timeout rounded up to a second",
			settings: Settings{TCPBeLiberal: true, UDPTimeout: 500 * time.Millisecond, UDPStreamTimeout: 150*time.Second + 900*time.Millisecond},
			cpus:     2,
			wantWrites: []string{"nf_conntrack_udp_timeout=1", "nf_conntrack_udp_timeout_stream=150",
				"nf_conntrack_tcp_be_liberal=1"},
		},
		{
			name:     "inside a network namespace: the table size fails, the rest is still set",
			settings: kubeProxyDefaults, cpus: 2,
			writeErrs:  map[string]syscall.Errno{MaxSysctl: syscall.EACCES, HashsizeParam: syscall.EOPNOTSUPP},
			wantWrites: []string{"nf_conntrack_tcp_timeout_established=86400", "nf_conntrack_tcp_timeout_close_wait=3600"},
			wantErrs:   []string{"writing sysctl net/netfilter/nf_conntrack_max=131072: permission denied (nf_conntrack_max is read-only outside the initial network namespace"},
		},
		{
			name:     "an unreadable hash size is raised anyway",
			settings: Settings{MaxPerCore: 32768, Min: 131072}, cpus: 2,
			readErrs:   map[string]syscall.Errno{HashsizeParam: syscall.EACCES},
			wantWrites: []string{"nf_conntrack_max=131072", "hashsize=32768"},
		},
		{
			name:     "a read-only /proc/sys and /sys: one error per parameter, each naming it",
			settings: kubeProxyDefaults, cpus: 2,
			writeErrs: map[string]syscall.Errno{MaxSysctl: syscall.EROFS, TCPEstablishedTimeoutSysctl: syscall.EROFS, TCPCloseWaitTimeoutSysctl: syscall.EROFS},
			wantErrs: []string{
				"nf_conntrack_max=131072: read-only file system (mounted read-only",
				"nf_conntrack_tcp_timeout_established=86400: read-only file system",
				"nf_conntrack_tcp_timeout_close_wait=3600: read-only file system",
			},
		},
		{
			name:     "no nf_conntrack module",
			settings: Settings{UDPTimeout: time.Minute}, cpus: 2,
			values:   map[string]string{},
			wantErrs: []string{"writing sysctl net/netfilter/nf_conntrack_udp_timeout=60: no such file or directory (is the nf_conntrack module loaded?)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values := tt.values
			if values == nil {
				values = kernelDefaults()
			}
			p, f := fakeKernel(values, tt.readErrs, tt.writeErrs)
			changes, err := Tune(p, tt.settings, tt.cpus)
			if diff := cmp.Diff(tt.wantWrites, shortWrites(f)); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if len(changes) != len(tt.wantWrites) {
				t.Errorf("Tune reported %d changes %+v, want one per write", len(changes), changes)
			}
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if len(got) != len(tt.wantErrs) {
				t.Fatalf("errors:\n%v\nwant %d, containing %q", err, len(tt.wantErrs), tt.wantErrs)
			}
			for i, want := range tt.wantErrs {
				if !strings.Contains(got[i], want) {
					t.Errorf("error %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}

func TestTuneReportsOldValues(t *testing.T) {
	p, _ := fakeKernel(map[string]string{UDPTimeoutSysctl: "", UDPStreamTimeoutSysctl: "120"},
		map[string]syscall.Errno{UDPTimeoutSysctl: syscall.EACCES}, nil)
	changes, err := Tune(p, Settings{UDPTimeout: time.Minute, UDPStreamTimeout: 3 * time.Minute}, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{{Path: UDPTimeoutSysctl, Old: -1, New: 60}, {Path: UDPStreamTimeoutSysctl, Old: 120, New: 180}}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}
