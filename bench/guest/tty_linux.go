package guest

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// openRawOutput opens a guest tty for the program's output with output
// processing off, so bytes reach the host as written ("\n" would otherwise
// become "\r\n"). O_NOCTTY: it must not become anyone's controlling
// terminal, or closing it could send the program SIGHUP.
func openRawOutput(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", path, err)
	}
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("reading %s settings: %w", path, err)
	}
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ICANON | unix.ISIG | unix.IEXTEN
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("setting %s to raw output: %w", path, err)
	}
	return fd, nil
}

// drain waits until everything written to the tty has been handed to the
// host (tcdrain), so powering off loses no output.
func drain(fd int) error {
	if err := unix.IoctlSetInt(fd, unix.TCSBRK, 1); err != nil {
		return fmt.Errorf("draining tty output: %w", err)
	}
	return nil
}
