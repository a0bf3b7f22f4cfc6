package image

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// TestImageBinaries checks, without running anything, that each
// architecture's image holds binaries of that architecture: a static
// kproxy, and the tools kproxy and an operator run, found on the image's
// PATH through Debian's alternatives, down to the files they resolve to.
// For an image of another architecture than the test machine's, this is
// what shows the build used the right packages and the right kproxy.
func TestImageBinaries(t *testing.T) {
	for _, v := range []imageVariant{amd64Image(), arm64Image()} {
		t.Run(v.arch, func(t *testing.T) {
			img := unpackImage(t, imageArchive(t, v))
			t.Run("kproxy", func(t *testing.T) {
				f, err := openImageELF(img.Rootfs, "/usr/local/bin/kproxy", v.machine)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if interp, err := interpreter(f); err != nil {
					t.Fatal(err)
				} else if interp != "" {
					t.Errorf("/usr/local/bin/kproxy is dynamically linked (interpreter %s); build.sh takes static binaries only", interp)
				}
			})
			pathEnv := imageEnvValue(img.Config.Config.Env, "PATH")
			for _, tc := range []struct {
				tool   string
				target string // the file the tool resolves to
			}{
				// Debian's default alternative is the nf_tables backend.
				{"iptables", "/usr/sbin/xtables-nft-multi"},
				{"iptables-save", "/usr/sbin/xtables-nft-multi"},
				{"iptables-restore", "/usr/sbin/xtables-nft-multi"},
				{"iptables-nft", "/usr/sbin/xtables-nft-multi"},
				{"iptables-legacy", "/usr/sbin/xtables-legacy-multi"},
				{"nft", "/usr/sbin/nft"},
				{"conntrack", "/usr/sbin/conntrack"},
				{"ip", "/usr/bin/ip"},
			} {
				t.Run(tc.tool, func(t *testing.T) {
					target, err := lookPathIn(img.Rootfs, pathEnv, tc.tool)
					if err != nil {
						t.Fatal(err)
					}
					if target != tc.target {
						t.Errorf("%s resolves to %s in the image, want %s", tc.tool, target, tc.target)
					}
					if err := checkLinkedFor(img.Rootfs, target, v.machine); err != nil {
						t.Error(err)
					}
				})
			}
		})
	}
}

// checkLinkedFor checks that the image's file at name is an ELF binary for
// machine and, if it is dynamically linked, that its loader is in the image
// and for the same machine.
func checkLinkedFor(rootfs, name string, machine elf.Machine) error {
	f, err := openImageELF(rootfs, name, machine)
	if err != nil {
		return err
	}
	defer f.Close()
	interp, err := interpreter(f)
	if err != nil {
		return fmt.Errorf("the image's %s: %w", name, err)
	}
	if interp == "" {
		return nil // static
	}
	loader, err := resolveIn(rootfs, interp)
	if err != nil {
		return fmt.Errorf("%s's loader %s is not in the image: %w", name, interp, err)
	}
	l, err := openImageELF(rootfs, loader, machine)
	if err != nil {
		return fmt.Errorf("%s's loader: %w", name, err)
	}
	return l.Close()
}

// openImageELF opens the image's file at name (already resolved) and checks
// that it is a 64-bit ELF file for machine.
func openImageELF(rootfs, name string, machine elf.Machine) (*elf.File, error) {
	f, err := elf.Open(filepath.Join(rootfs, name))
	if err != nil {
		return nil, fmt.Errorf("reading the image's %s as ELF: %w", name, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != machine {
		f.Close()
		return nil, fmt.Errorf("the image's %s is %s for %s, want %s for %s", name, f.Class, f.Machine, elf.ELFCLASS64, machine)
	}
	return f, nil
}

// interpreter returns the program interpreter (the dynamic loader) an ELF
// file names in its PT_INTERP header, or "" for a static binary.
func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		name, err := io.ReadAll(p.Open())
		if err != nil {
			return "", fmt.Errorf("reading PT_INTERP: %w", err)
		}
		return string(bytes.TrimRight(name, "\x00")), nil
	}
	return "", nil
}

// imageEnvValue returns the value of key in an image configuration's
// environment (KEY=VALUE entries).
func imageEnvValue(env []string, key string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, key+"="); ok {
			return v
		}
	}
	return ""
}

// lookPathIn finds tool in the directories of pathEnv as a shell in the
// image would, and returns the executable file it resolves to, a path in
// the image.
func lookPathIn(rootfs, pathEnv, tool string) (string, error) {
	for _, dir := range filepath.SplitList(pathEnv) {
		target, err := resolveIn(rootfs, path.Join(dir, tool))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(filepath.Join(rootfs, target))
		if err != nil {
			return "", err
		}
		if fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return target, nil
		}
	}
	return "", fmt.Errorf("no executable %s on the image's PATH %s", tool, pathEnv)
}

// maxSymlinks is how many symbolic links resolveIn follows, as Linux does.
const maxSymlinks = 40

// resolveIn resolves name's symbolic links as they are inside the image:
// an absolute target starts from rootfs, not from the test machine's root
// (Debian's alternatives are absolute links through /etc/alternatives).
// It returns the path in the image, free of links.
func resolveIn(rootfs, name string) (string, error) {
	parts := strings.Split(name, "/")
	resolved := "/"
	for links := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, part)
		fi, err := os.Lstat(filepath.Join(rootfs, next))
		if err != nil {
			return "", fmt.Errorf("resolving %s in the image: %w", name, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("resolving %s in the image: more than %d symbolic links", name, maxSymlinks)
		}
		target, err := os.Readlink(filepath.Join(rootfs, next))
		if err != nil {
			return "", fmt.Errorf("resolving %s in the image: %w", name, err)
		}
		if path.IsAbs(target) {
			resolved = "/"
		}
		// A relative target is relative to the link's directory, resolved.
		parts = append(strings.Split(target, "/"), parts...)
	}
	return resolved, nil
}

// TestResolveIn resolves links in a root filesystem laid out as Debian's
// (merged /usr, alternatives), where absolute targets must not reach the
// test machine's own files.
func TestResolveIn(t *testing.T) {
	rootfs := t.TempDir()
	for _, d := range []string{"usr/sbin", "usr/bin", "etc/alternatives"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "usr/sbin/xtables-nft-multi"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"sbin":                      "usr/sbin",
		"usr/sbin/iptables":         "/etc/alternatives/iptables",
		"etc/alternatives/iptables": "/usr/sbin/iptables-nft",
		"usr/sbin/iptables-nft":     "xtables-nft-multi",
		"usr/bin/iptables-up":       "../sbin/iptables",
		"usr/bin/host-shell":        "/bin/sh", // on the test machine, not in rootfs
		"usr/bin/loop":              "loop",
	} {
		if err := os.Symlink(target, filepath.Join(rootfs, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, want string
		err        string // in the error, when one is wanted
	}{
		{"/usr/sbin/xtables-nft-multi", "/usr/sbin/xtables-nft-multi", ""},
		{"/sbin/iptables", "/usr/sbin/xtables-nft-multi", ""},
		{"/usr/bin/iptables-up", "/usr/sbin/xtables-nft-multi", ""},
		{"/sbin/../sbin/iptables", "/usr/sbin/xtables-nft-multi", ""},
		// As in the kernel, .. after a linked directory is its target's parent.
		{"/sbin/../etc/alternatives/iptables", "", "usr/etc: no such file or directory"},
		{"/usr/bin/host-shell", "", "no such file or directory"},
		{"/usr/bin/loop", "", "more than 40 symbolic links"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveIn(rootfs, tc.name)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("resolveIn(%s) = %q, %v; want an error containing %q", tc.name, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("resolveIn(%s) = %q, %v; want %q", tc.name, got, err, tc.want)
			}
		})
	}
}
