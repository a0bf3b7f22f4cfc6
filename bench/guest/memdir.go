package guest

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// shmDir is where UML itself would put guest RAM when TMPDIR is unset: a
// tmpfs on most hosts.
const shmDir = "/dev/shm"

// memDir picks the directory UML creates (and at once unlinks) its guest
// RAM file in: shmDir when it is a tmpfs with room for mem, else runDir.
// On a disk file system the kernel writes the guest's dirty memory back to
// disk as it runs (hundreds of megabytes for one end-to-end case), which
// slows every guest and the host's other work; on a tmpfs it stays in RAM.
func memDir(runDir, mem string) string {
	size, ok := memBytes(mem)
	if !ok {
		return runDir
	}
	var st unix.Statfs_t
	if err := unix.Statfs(shmDir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return runDir
	}
	if uint64(st.Bavail)*uint64(st.Bsize) < size {
		return runDir
	}
	return shmDir
}

// memBytes is mem (validMem's form: 512M, 1G) in bytes.
func memBytes(mem string) (uint64, bool) {
	if !validMem(mem) {
		return 0, false
	}
	n, err := strconv.ParseUint(mem[:len(mem)-1], 10, 64)
	if err != nil {
		return 0, false
	}
	if mem[len(mem)-1] == 'G' {
		return n << 30, true
	}
	return n << 20, true
}
