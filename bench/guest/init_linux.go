package guest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// initPath is the PATH the init uses for modprobe; the program gets the
// host's environment instead.
const initPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// guestHostname is the guest's node name (a fresh kernel has "(none)").
const guestHostname = "kproxy-guest"

// RunningAsInit reports whether this process is the guest's PID 1, started
// by Run; the binary must then call RunInit and do nothing else.
func RunningAsInit() bool {
	return os.Getpid() == 1 && os.Getenv(envSharedDir) != ""
}

// RunInit is the guest's PID 1: it prepares the guest (writable overlay
// root, /proc, /sys, /dev, modules, loopback, hostname), runs the program
// the host asked for, reports its exit code and powers the guest off. It
// never returns: PID 1 exiting would panic the guest kernel.
func RunInit() {
	shared := os.Getenv(envSharedDir)
	code, ttys, err := initAndRun(shared)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kproxy guest init: %v\n", err)
	}
	if werr := writeResult(shared, code, err); werr != nil {
		fmt.Fprintf(os.Stderr, "kproxy guest init: reporting the result: %v\n", werr)
	}
	for _, fd := range ttys {
		if derr := drain(fd); derr != nil {
			fmt.Fprintf(os.Stderr, "kproxy guest init: %v\n", derr)
		}
	}
	powerOff()
}

// initAndRun does everything but reporting; a panic becomes an error so
// the host hears about it.
func initAndRun(shared string) (code int, ttys []int, err error) {
	defer func() {
		if p := recover(); p != nil {
			code, err = -1, fmt.Errorf("init panicked: %v", p)
		}
	}()
	os.Setenv("PATH", initPath)
	release, err := kernelRelease()
	if err != nil {
		return -1, nil, err
	}
	start := time.Now()
	if err := prepareRoot(shared, release); err != nil {
		return -1, nil, err
	}
	spec, err := readSpec(shared)
	if err != nil {
		return -1, nil, err
	}
	if err := loadModules(spec.Modules); err != nil {
		return -1, nil, err
	}
	if spec.NoNetfilter {
		if err := withoutNetfilter(); err != nil {
			return -1, nil, err
		}
	}
	if err := setUpNetwork(); err != nil {
		return -1, nil, err
	}
	fmt.Fprintf(os.Stderr, "kproxy guest init: ready in %v; running %s\n", time.Since(start).Round(time.Millisecond), spec.Argv[0])
	return runProgram(spec)
}

func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// loadModules loads the modules in one modprobe run (dependencies too).
func loadModules(mods []string) error {
	if len(mods) == 0 {
		return nil
	}
	out, err := exec.Command("modprobe", append([]string{"-a", "--"}, mods...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("loading kernel modules (modprobe -a %s): %w: %s", strings.Join(mods, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setUpNetwork brings loopback up, as on any booted host, and names the
// guest.
func setUpNetwork() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding the loopback link: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	if err := unix.Sethostname([]byte(guestHostname)); err != nil {
		return fmt.Errorf("setting the hostname: %w", err)
	}
	return nil
}

// powerOff stops the guest, and with it UML; the sysrq trigger is the
// fallback when reboot(2) is refused.
func powerOff() {
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	fmt.Fprintf(os.Stderr, "kproxy guest init: reboot(POWER_OFF): %v; trying sysrq\n", err)
	if werr := os.WriteFile("/proc/sysrq-trigger", []byte("o"), 0); werr != nil {
		fmt.Fprintf(os.Stderr, "kproxy guest init: sysrq power-off: %v\n", errors.Join(err, werr))
	}
	// The power-off is asynchronous and PID 1 must not exit meanwhile (a
	// bare select{} would trip Go's deadlock detector, which exits).
	for {
		time.Sleep(time.Hour)
	}
}
