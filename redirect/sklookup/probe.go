package sklookup

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Probe says whether this kernel, with this process's privileges, can run
// the steering: it creates the maps, loads the program, attaches it for a
// moment to the calling thread's network namespace and puts a listening TCP
// socket and a bound UDP socket into the slots. With no targets and no
// guarded addresses the program passes every packet, so the namespace sees
// no change; run it in a throwaway namespace all the same where one is at
// hand. nil when everything worked; else the error says what is missing.
func Probe() error {
	s, err := Attach("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	probeErr := probeSockets(s)
	return errors.Join(probeErr, s.Close())
}

// probeSockets puts an IPv4 TCP listener and UDP socket, bound to ephemeral
// ports, into their slots and closes them again.
func probeSockets(s *Steering) error {
	for _, c := range []struct {
		slot Slot
		typ  int
	}{{TCP4, unix.SOCK_STREAM}, {UDP4, unix.SOCK_DGRAM}} {
		fd, err := unix.Socket(unix.AF_INET, c.typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("probe socket for %s: %w", c.slot, err)
		}
		f := os.NewFile(uintptr(fd), "sklookup-probe")
		err = unix.Bind(fd, &unix.SockaddrInet4{})
		if err == nil && c.typ == unix.SOCK_STREAM {
			err = unix.Listen(fd, 1)
		}
		if err == nil {
			err = s.SetSocket(c.slot, f)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("probe socket for %s: %w", c.slot, err)
		}
	}
	return nil
}

// hint adds the usual cause to a kernel refusal to load or attach.
func hint(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w (needs CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN; unprivileged BPF does not allow sk_lookup)", err)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("%w (the kernel may predate sk_lookup programs, Linux 5.9, or lack CONFIG_BPF_SYSCALL)", err)
	}
	return err
}
