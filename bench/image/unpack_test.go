package image

import (
	"archive/tar"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

// imageEnv names the OCI archive the tests run; by default the one `make
// image` writes. arm64ImageEnv names the arm64 one (`make image-arm64`),
// which the tests read without running it.
const (
	imageEnv      = "KPROXY_IMAGE"
	arm64ImageEnv = "KPROXY_IMAGE_ARM64"
)

// imageVariant is one architecture's image: where its archive is and what
// its binaries must be built for.
type imageVariant struct {
	arch    string      // the OCI configuration's (and GOARCH's) name
	machine elf.Machine // every binary's ELF machine
	env     string      // names the archive
	file    string      // the archive make writes, under bin/
	target  string      // the make target that writes it
}

func amd64Image() imageVariant {
	return imageVariant{arch: "amd64", machine: elf.EM_X86_64, env: imageEnv, file: "kproxy-image.oci.tar", target: "image"}
}

func arm64Image() imageVariant {
	return imageVariant{arch: "arm64", machine: elf.EM_AARCH64, env: arm64ImageEnv, file: "kproxy-image-arm64.oci.tar", target: "image-arm64"}
}

// imageArchive returns the archive of v to test, skipping the test when not
// root (chroot, namespaces, extracting the layers' owners) or when there is
// no image yet; an archive named in v.env (make test names the one it
// built) must exist.
func imageArchive(t *testing.T, v imageVariant) string {
	t.Helper()
	lab.RequireRoot(t)
	if path := os.Getenv(v.env); path != "" {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("the image %s names: %v", v.env, err)
		}
		return path
	}
	path, err := filepath.Abs(filepath.Join("../../bin", v.file))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		t.Skipf("no %s image at %s: run `sudo make %s` first (or name an archive in %s)", v.arch, path, v.target, v.env)
	} else if err != nil {
		t.Fatal(err)
	}
	return path
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

// imageConfig is the part of an OCI image configuration the tests read.
type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd"`
		Env        []string `json:"Env"`
	} `json:"config"`
}

// unpacked is an image whose layers are extracted into Rootfs.
type unpacked struct {
	// Name is the image's name in the archive (the index's ref.name).
	Name   string
	Rootfs string
	Config imageConfig
	Layers []descriptor
}

const layerType = "application/vnd.oci.image.layer.v1.tar+gzip"

// unpackImage reads the OCI archive as a runtime would (index, manifest,
// configuration, layers, every digest checked) and extracts its layers in
// order into a root filesystem under the test's TempDir.
func unpackImage(t *testing.T, archive string) *unpacked {
	t.Helper()
	img, err := unpack(archive, t.TempDir())
	if err != nil {
		t.Fatalf("unpacking %s: %v", archive, err)
	}
	return img
}

func unpack(archive, dir string) (*unpacked, error) {
	layout := filepath.Join(dir, "layout")
	if err := extractLayout(archive, layout); err != nil {
		return nil, err
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := readJSON(filepath.Join(layout, "index.json"), &index); err != nil {
		return nil, err
	}
	if len(index.Manifests) != 1 {
		return nil, fmt.Errorf("index.json has %d manifests, want one: %+v", len(index.Manifests), index.Manifests)
	}
	manifestDesc := index.Manifests[0]
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := readBlobJSON(layout, manifestDesc, &manifest); err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	img := &unpacked{Rootfs: filepath.Join(dir, "rootfs"), Layers: manifest.Layers,
		Name: manifestDesc.Annotations["org.opencontainers.image.ref.name"]}
	if err := readBlobJSON(layout, manifest.Config, &img.Config); err != nil {
		return nil, fmt.Errorf("reading the image configuration: %w", err)
	}
	if err := os.Mkdir(img.Rootfs, 0o755); err != nil {
		return nil, err
	}
	// The build's layers are fresh archives (no whiteouts to apply), so GNU
	// tar extracting them in order gives the root filesystem.
	for i, l := range manifest.Layers {
		if l.MediaType != layerType {
			return nil, fmt.Errorf("layer %d is %s, want %s", i, l.MediaType, layerType)
		}
		path, err := checkBlob(layout, l)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		out, err := exec.Command("tar", "--extract", "--gzip", "--numeric-owner", "--same-permissions",
			"--file", path, "--directory", img.Rootfs).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("extracting layer %d (%s): %w\n%s", i, l.Digest, err, out)
		}
	}
	// Mount points a runtime provides: the build leaves /dev out, and the
	// node's modules are mounted over /lib/modules.
	for _, d := range []string{"dev", "usr/lib/modules"} {
		if err := os.MkdirAll(filepath.Join(img.Rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// extractLayout extracts an oci-archive, which holds only the layout's
// directories and regular files.
func extractLayout(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", archive, err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%s: entry %q outside the layout", archive, h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFile(path, tr); err != nil {
				return fmt.Errorf("%s: %w", archive, err)
			}
		default:
			return fmt.Errorf("%s: entry %q of type %c; an OCI layout has only directories and files", archive, h.Name, h.Typeflag)
		}
	}
}

func writeFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return out.Close()
}

// checkBlob returns the path of a blob after checking its size and digest.
func checkBlob(layout string, d descriptor) (string, error) {
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexDigest) != 64 || strings.ContainsAny(hexDigest, "/.") {
		return "", fmt.Errorf("digest %q is not sha256", d.Digest)
	}
	path := filepath.Join(layout, "blobs", "sha256", hexDigest)
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("reading blob %s: %w", d.Digest, err)
	}
	if n != d.Size {
		return "", fmt.Errorf("blob %s has %d bytes, its descriptor says %d", d.Digest, n, d.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != hexDigest {
		return "", fmt.Errorf("blob %s has digest sha256:%s", d.Digest, got)
	}
	return path, nil
}

func readBlobJSON(layout string, d descriptor, v any) error {
	path, err := checkBlob(layout, d)
	if err != nil {
		return err
	}
	return readJSON(path, v)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}
