package guest

import (
	"fmt"
	"strings"
)

// envSharedDir, given on the kernel command line, reaches the guest init's
// environment (the kernel passes unknown KEY=val arguments to init): the
// shared directory's path, the same on host and guest.
const envSharedDir = "KPROXY_GUEST_SHARED"

// bootPaths are the host paths the kernel command line names.
type bootPaths struct {
	Init      string // the binary the guest runs as PID 1
	SharedDir string // mounted read-write in the guest
	UMLDir    string // UML's control sockets (uml_dir)
}

// File descriptors UML inherits (exec.Cmd.ExtraFiles start at 3): guest
// console 0 (kernel log and init's own messages), and two more consoles
// that carry the program's stdout and stderr.
const (
	consoleFD = 3
	stdoutFD  = 4
	stderrFD  = 5
)

// Guest ttys wired to stdoutFD and stderrFD.
const (
	stdoutTTY = "/dev/tty1"
	stderrTTY = "/dev/tty2"
)

// kernelArgs is the UML command line: the host's filesystem as a read-only
// hostfs root, consoles on inherited descriptors, no serial lines.
func kernelArgs(p bootPaths, mem string) ([]string, error) {
	for _, c := range []struct{ what, path string }{
		{"init binary", p.Init}, {"shared directory", p.SharedDir}, {"UML directory", p.UMLDir},
	} {
		if err := checkBootPath(c.path); err != nil {
			return nil, fmt.Errorf("%s: %w", c.what, err)
		}
	}
	if !validMem(mem) {
		return nil, fmt.Errorf("guest memory %q: want a size like 512M or 1G", mem)
	}
	return []string{
		"mem=" + mem,
		"root=/dev/root", "rootfstype=hostfs", "rootflags=/", "ro",
		"init=" + p.Init,
		fmt.Sprintf("con0=null,fd:%d", consoleFD),
		fmt.Sprintf("con1=null,fd:%d", stdoutFD),
		fmt.Sprintf("con2=null,fd:%d", stderrFD),
		"con=null", "ssl=null",
		"uml_dir=" + p.UMLDir, "umid=kproxy-guest",
		"quiet",
		envSharedDir + "=" + p.SharedDir,
	}, nil
}

// checkBootPath refuses paths the kernel command line or a hostfs mount
// option would split: spaces separate kernel arguments, commas separate
// mount options.
func checkBootPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q is not absolute", p)
	}
	if i := strings.IndexAny(p, " \t\n\","); i >= 0 {
		return fmt.Errorf("path %q contains %q, which the kernel command line cannot carry; use a TMPDIR without it", p, p[i])
	}
	return nil
}

func validMem(mem string) bool {
	if len(mem) < 2 {
		return false
	}
	num, unit := mem[:len(mem)-1], mem[len(mem)-1]
	if unit != 'M' && unit != 'G' {
		return false
	}
	for _, r := range num {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
