package conntrack

import "kproxy.dev/kproxy/sync/sysctl"

// Params are where Tune reads and writes: the nf_conntrack sysctls, and the
// module parameter that holds the hash size. The zero value is the kernel's.
type Params struct {
	// Sysctls nil means /proc/sys.
	Sysctls sysctl.Sysctls
	// Modules holds module parameters by their name under /sys/module
	// (HashsizeParam); nil means the kernel's.
	Modules sysctl.Sysctls
}

// of returns where the parameter name lives.
func (p Params) of(name string) sysctl.Sysctls {
	if name == HashsizeParam {
		if p.Modules == nil {
			return sysctl.Proc{Root: sysctl.ModulesRoot}
		}
		return p.Modules
	}
	if p.Sysctls == nil {
		return sysctl.Proc{}
	}
	return p.Sysctls
}
