package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The guest boots with the host's filesystem as a read-only hostfs root.
// prepareRoot turns that into a root tests can write to without touching
// the host: an overlay whose lower layer is the host root and whose upper
// layer is guest RAM. Writes (/tmp, /run/netns, /etc, module symlinks)
// land in RAM and vanish at power-off; the test binary, its testdata and
// the host's tools are visible unchanged. Only the shared directory is
// mounted read-write through to the host.

// scratchDir is a directory present on every Debian root; a tmpfs mounted
// over it (in the old root, so the host's /run is unaffected) holds the
// overlay's upper layer.
const scratchDir = "/run"

// prepareRoot builds the overlay root, mounts the kernel filesystems and
// the shared directory in it, and pivots into it.
func prepareRoot(sharedDir, release string) error {
	if err := mount("tmpfs", scratchDir, "tmpfs", 0, "mode=0755"); err != nil {
		return err
	}
	if err := loadModuleFile(filepath.Join(ModuleRoot, release, "kernel/fs/overlayfs/overlay.ko")); err != nil {
		return err
	}
	base := filepath.Join(scratchDir, "kproxy-guest")
	upper, work, root := filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "root")
	for _, d := range []string{upper, work, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if err := mount("overlay", root, "overlay", 0, "lowerdir=/,upperdir="+upper+",workdir="+work); err != nil {
		return err
	}
	if err := mountSystemFilesystems(root); err != nil {
		return err
	}
	// modprobe looks in /lib/modules/<release>, which the host lacks.
	modDir := filepath.Join(root, "lib/modules")
	if err := os.MkdirAll(modDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", modDir, err)
	}
	if err := os.Symlink(filepath.Join(ModuleRoot, release), filepath.Join(modDir, release)); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("linking the module tree into /lib/modules: %w", err)
	}
	if err := mount("none", filepath.Join(root, sharedDir), "hostfs", 0, sharedDir); err != nil {
		return err
	}
	return pivot(root)
}

// mountSystemFilesystems gives the new root the guest's own /proc, /sys,
// /dev and an empty /run (the host's would show through otherwise).
func mountSystemFilesystems(root string) error {
	for _, m := range []struct{ fstype, dir, data string }{
		{"proc", "proc", ""},
		{"sysfs", "sys", ""},
		{"devtmpfs", "dev", "mode=0755"},
		{"devpts", "dev/pts", "ptmxmode=0666"},
		{"tmpfs", "dev/shm", "mode=1777"},
		{"tmpfs", "run", "mode=0755"},
	} {
		dir := filepath.Join(root, m.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
		if err := mount(m.fstype, dir, m.fstype, 0, m.data); err != nil {
			return err
		}
	}
	// devtmpfs lacks these; bash's process substitution needs /dev/fd.
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(root, "dev", name)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating /dev/%s: %w", name, err)
		}
	}
	return nil
}

// pivot makes root the root of the guest and detaches the old hostfs root
// (the overlay keeps what it needs of it).
func pivot(root string) error {
	old := filepath.Join(root, ".old-root")
	if err := os.MkdirAll(old, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", old, err)
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot_root to the overlay root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir to the new root: %w", err)
	}
	if err := unix.Unmount("/.old-root", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	if err := os.Remove("/.old-root"); err != nil {
		return fmt.Errorf("removing the old root's mount point: %w", err)
	}
	return nil
}

func mount(source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mounting %s on %s: %w", fstype, target, err)
	}
	return nil
}

// loadModuleFile loads one module with no dependencies, before modprobe
// can find the module tree.
func loadModuleFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening kernel module: %w", err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("loading kernel module %s: %w", path, err)
	}
	return nil
}
