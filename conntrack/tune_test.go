package conntrack

import (
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeParams holds parameter values, fails reads or writes of chosen
// paths, and records the writes.
type fakeParams struct {
	values  map[string]int
	getErrs map[string]error
	setErrs map[string]error
	writes  []string
}

func (p *fakeParams) Get(path string) (int, error) {
	if err := p.getErrs[path]; err != nil {
		return 0, err
	}
	v, ok := p.values[path]
	if !ok {
		return 0, fs.ErrNotExist
	}
	return v, nil
}

func (p *fakeParams) Set(path string, v int) error {
	if err := p.setErrs[path]; err != nil {
		return err
	}
	p.values[path] = v
	p.writes = append(p.writes, strings.TrimPrefix(strings.TrimPrefix(path, sysctlDir), "/sys/module/nf_conntrack/parameters/")+"="+strconv.Itoa(v))
	return nil
}

// kernelDefaults are a machine's values before tuning.
func kernelDefaults() map[string]int {
	return map[string]int{
		MaxPath: 65536, HashsizePath: 16384,
		TCPEstablishedTimeoutPath: 432000, TCPCloseWaitTimeoutPath: 60, TCPBeLiberalPath: 0,
		UDPTimeoutPath: 30, UDPStreamTimeoutPath: 120,
	}
}

// kubeProxyDefaults are the flags' defaults.
var kubeProxyDefaults = Settings{MaxPerCore: 32768, Min: 131072, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour}

func TestTune(t *testing.T) {
	tests := []struct {
		name       string
		settings   Settings
		cpus       int
		values     map[string]int // nil: kernelDefaults
		getErrs    map[string]error
		setErrs    map[string]error
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
			values:     map[string]int{MaxPath: 65536, HashsizePath: 262144},
			wantWrites: []string{"nf_conntrack_max=131072"},
		},
		{
			name:     "values already in place are not written",
			settings: kubeProxyDefaults, cpus: 2,
			values: map[string]int{MaxPath: 131072, HashsizePath: 32768,
				TCPEstablishedTimeoutPath: 86400, TCPCloseWaitTimeoutPath: 3600},
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
			setErrs:    map[string]error{MaxPath: fs.ErrPermission, HashsizePath: syscall.EOPNOTSUPP},
			wantWrites: []string{"nf_conntrack_tcp_timeout_established=86400", "nf_conntrack_tcp_timeout_close_wait=3600"},
			wantErrs:   []string{"setting /proc/sys/net/netfilter/nf_conntrack_max to 131072: permission denied (nf_conntrack_max is read-only outside the initial network namespace"},
		},
		{
			name:     "an unreadable hash size is raised anyway",
			settings: Settings{MaxPerCore: 32768, Min: 131072}, cpus: 2,
			getErrs:    map[string]error{HashsizePath: fs.ErrPermission},
			wantWrites: []string{"nf_conntrack_max=131072", "hashsize=32768"},
		},
		{
			name:     "a read-only /proc/sys and /sys: one error per parameter, each naming it",
			settings: kubeProxyDefaults, cpus: 2,
			setErrs: map[string]error{MaxPath: syscall.EROFS, TCPEstablishedTimeoutPath: syscall.EROFS, TCPCloseWaitTimeoutPath: syscall.EROFS},
			wantErrs: []string{
				"nf_conntrack_max to 131072: read-only file system (mounted read-only",
				"nf_conntrack_tcp_timeout_established to 86400: read-only file system",
				"nf_conntrack_tcp_timeout_close_wait to 3600: read-only file system",
			},
		},
		{
			name:     "no nf_conntrack module",
			settings: Settings{UDPTimeout: time.Minute}, cpus: 2,
			values:   map[string]int{},
			setErrs:  map[string]error{UDPTimeoutPath: fs.ErrNotExist},
			wantErrs: []string{"nf_conntrack_udp_timeout to 60: file does not exist (is the nf_conntrack module loaded?)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values := tt.values
			if values == nil {
				values = kernelDefaults()
			}
			p := &fakeParams{values: values, getErrs: tt.getErrs, setErrs: tt.setErrs}
			changes, err := Tune(p, tt.settings, tt.cpus)
			if diff := cmp.Diff(tt.wantWrites, p.writes); diff != "" {
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
	p := &fakeParams{values: map[string]int{}, getErrs: map[string]error{UDPTimeoutPath: errors.New("unreadable")}}
	p.values[UDPStreamTimeoutPath] = 120
	changes, err := Tune(p, Settings{UDPTimeout: time.Minute, UDPStreamTimeout: 3 * time.Minute}, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{{Path: UDPTimeoutPath, Old: -1, New: 60}, {Path: UDPStreamTimeoutPath, Old: 120, New: 180}}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}
