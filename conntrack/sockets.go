package conntrack

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
)

// BoundUDPPorts lists the local ports UDP sockets of this network namespace
// are bound to (both families), from /proc/net/udp and /proc/net/udp6. A
// userspace-mode flow REDIRECTed to a port nothing is bound to any more (a
// relay stopped, or kproxy restarted on new proxy ports) is stale.
func BoundUDPPorts() ([]uint16, error) {
	set := map[uint16]struct{}{}
	for _, path := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(path, "6") {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return nil, fmt.Errorf("listing UDP sockets: %w", err)
		}
		err = readBoundPorts(f, set)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("listing UDP sockets: %s: %w", path, err)
		}
	}
	return sortedPorts(set), nil
}

// readBoundPorts adds the local ports of a /proc/net/udp-style table to set.
// Each line after the header reads "sl local_address rem_address st ...",
// local_address being hex "ADDR:PORT".
func readBoundPorts(r io.Reader, set map[uint16]struct{}) error {
	sc := bufio.NewScanner(r)
	for line := 0; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if line == 0 || len(fields) < 2 {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			return fmt.Errorf("line %d: local address %q has no port", line+1, fields[1])
		}
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			return fmt.Errorf("line %d: local port %q: %w", line+1, hexPort, err)
		}
		set[uint16(port)] = struct{}{}
	}
	return sc.Err()
}

// sortedPorts returns the keys of a port set, sorted.
func sortedPorts(set map[uint16]struct{}) []uint16 {
	out := make([]uint16, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
