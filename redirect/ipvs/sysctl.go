package ipvs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Sysctls writes kernel settings; names are paths under /proc/sys
// ("net/ipv4/vs/conntrack").
type Sysctls interface {
	Write(name string, value int) error
}

// ProcSysctls writes sysctls through /proc/sys (or Root, for tests).
type ProcSysctls struct {
	Root string
}

func (p ProcSysctls) Write(name string, value int) error {
	root := p.Root
	if root == "" {
		root = "/proc/sys"
	}
	path := filepath.Join(root, filepath.Clean("/"+name))
	// No O_CREATE: a sysctl the kernel lacks is an error, not a new file.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("opening sysctl %s: %w", name, err)
	}
	_, err = f.WriteString(strconv.Itoa(value))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing sysctl %s=%d: %w", name, value, err)
	}
	return nil
}

// requiredSysctl says whether the mode cannot work without name: IPVS
// traffic must be forwarded, and must go through conntrack to be
// masqueraded. Any other one failing is a warning.
func requiredSysctl(name string) bool {
	return name == "net/ipv4/ip_forward" || name == "net/ipv4/vs/conntrack"
}
