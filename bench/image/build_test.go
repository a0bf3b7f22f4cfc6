package image

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildScript is make image's recipe, seen from this package's directory.
const buildScript = "../../deploy/image/build.sh"

// TestBuildScriptRefusesWrongBinaries runs build.sh on ELF headers it must
// refuse before it builds anything: a binary for another architecture than
// ARCH's, an architecture it does not build, a dynamically linked binary.
// It needs neither root nor a Debian mirror, so it always runs.
func TestBuildScriptRefusesWrongBinaries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		arch    string // build.sh's ARCH; "" leaves it unset (amd64)
		machine elf.Machine
		// extra follows the header: a dynamic binary names its loader.
		extra string
		want  string // in build.sh's error
	}{
		{"x86-64 binary for arm64", "arm64", elf.EM_X86_64, "", "is built for x86-64, not for aarch64 as ARCH=arm64 needs"},
		{"aarch64 binary for the default amd64", "", elf.EM_AARCH64, "", "is built for aarch64, not for x86-64 as ARCH=amd64 needs"},
		{"aarch64 binary for amd64", "amd64", elf.EM_AARCH64, "", "is built for aarch64, not for x86-64 as ARCH=amd64 needs"},
		{"another machine", "arm64", elf.EM_RISCV, "", "is built for e_machine f3 00, not for aarch64"},
		{"unsupported architecture", "riscv64", elf.EM_RISCV, "", "ARCH=riscv64 is not supported"},
		{"dynamic aarch64 binary", "arm64", elf.EM_AARCH64, "/lib/ld-linux-aarch64.so.1", "is dynamically linked"},
		{"dynamic x86-64 binary", "amd64", elf.EM_X86_64, "/lib64/ld-linux-x86-64.so.2", "is dynamically linked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			binary := filepath.Join(dir, "kproxy")
			if err := writeELFHeader(binary, tc.machine, tc.extra); err != nil {
				t.Fatal(err)
			}
			output := filepath.Join(dir, "image.oci.tar")
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, buildScript, binary, output)
			// The caller's ARCH and MIRROR do not count. Should the checks
			// let a binary through, the build fails fast on a mirror that
			// does not answer instead of fetching Debian.
			cmd.Env = []string{"MIRROR=http://127.0.0.1:9/debian"}
			for _, e := range os.Environ() {
				if !strings.HasPrefix(e, "ARCH=") && !strings.HasPrefix(e, "MIRROR=") {
					cmd.Env = append(cmd.Env, e)
				}
			}
			if tc.arch != "" {
				cmd.Env = append(cmd.Env, "ARCH="+tc.arch)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("build.sh on a %s header with ARCH=%q: %v, want it to exit non-zero\n%s", tc.machine, tc.arch, err, &stderr)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("build.sh on a %s header with ARCH=%q printed %q, want %q", tc.machine, tc.arch, &stderr, tc.want)
			}
			if _, err := os.Stat(output); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("build.sh refused the binary but wrote %s (stat: %v)", output, err)
			}
		})
	}
}

// writeELFHeader writes an executable that is only a little-endian 64-bit
// ELF header for machine, followed by extra: all build.sh reads of a binary.
func writeELFHeader(path string, machine elf.Machine, extra string) error {
	h := elf.Header64{
		Type:      uint16(elf.ET_EXEC),
		Machine:   uint16(machine),
		Version:   uint32(elf.EV_CURRENT),
		Ehsize:    uint16(binary.Size(elf.Header64{})),
		Phentsize: uint16(binary.Size(elf.Prog64{})),
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		return err
	}
	buf.WriteString(extra)
	return os.WriteFile(path, buf.Bytes(), 0o755)
}
