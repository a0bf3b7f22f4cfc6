package conntrack

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadBoundPorts(t *testing.T) {
	tests := []struct {
		name, table string
		want        []uint16
		wantErr     bool
	}{
		{
			name: "IPv4 and IPv6 tables",
			table: `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  119: 00000000:A028 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 31337 2 0000000000000000 0
  120: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 31338 2 0000000000000000 0
  121: 00000000000000000000000000000000:2328 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000 0 0 4242 2 0 0
`,
			want: []uint16{53, 9000, 41000},
		},
		{name: "header only", table: "   sl  local_address rem_address   st\n", want: []uint16{}},
		{name: "a local address without a port", table: "header\n 1: 0100007F 00000000:0000 07\n", wantErr: true},
		{name: "a port that is not hex", table: "header\n 1: 0100007F:ZZ 00000000:0000 07\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := map[uint16]struct{}{}
			err := readBoundPorts(strings.NewReader(tt.table), set)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, sortedPorts(set)); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
		})
	}
}
