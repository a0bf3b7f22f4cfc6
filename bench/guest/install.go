package guest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// ModuleRoot is where Debian's user-mode-linux package keeps the guest
// kernel's modules, one directory per kernel release.
const ModuleRoot = "/usr/lib/uml/modules"

const installHint = "apt-get install user-mode-linux kmod (or run .ci/install-deps)"

// packagedKernel is where the user-mode-linux package installs the kernel.
const packagedKernel = "/usr/bin/linux.uml"

// findKernel resolves the UML kernel binary: the given path, else
// linux.uml on PATH, else the first fallback that exists.
func findKernel(kernel string, fallbacks ...string) (string, error) {
	if kernel != "" {
		if _, err := os.Stat(kernel); err != nil {
			return "", fmt.Errorf("UML kernel %s: %w", kernel, err)
		}
		return kernel, nil
	}
	if p, err := exec.LookPath("linux.uml"); err == nil {
		return p, nil
	}
	for _, p := range fallbacks {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("the guest kernel (user-mode-linux, linux.uml) is not installed: %s", installHint)
}

// checkGuestTools checks what the guest takes from the host's filesystem
// besides the kernel: its modules and modprobe (the guest's kernel also
// calls modprobe to load modules on demand).
func checkGuestTools() error {
	entries, err := os.ReadDir(ModuleRoot)
	if err != nil || len(entries) == 0 {
		return fmt.Errorf("the guest kernel's modules are missing from %s: %s", ModuleRoot, installHint)
	}
	for _, p := range []string{"/usr/sbin/modprobe", "/sbin/modprobe"} {
		if _, err := os.Stat(p); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("checking for modprobe at %s: %w", p, err)
		}
	}
	return fmt.Errorf("modprobe (kmod) is not installed; the guest loads its kernel modules with it: %s", installHint)
}
