package cluster

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Images the cluster builds for itself: no registry is reachable.
const (
	// PauseImage is every pod sandbox's image (containerd's sandbox_image).
	PauseImage = "localhost/kproxy-cluster/pause:latest"
	// PodwebImage serves HTTP for the smoke check (cmd/podweb).
	PodwebImage = "localhost/kproxy-cluster/podweb:latest"
	// CoreDNSImage is the cluster DNS's image, when Config.CoreDNS is set.
	CoreDNSImage = "localhost/kproxy-cluster/coredns:latest"
	// kubernetesModule holds pause.c, at the version bench/tools pins.
	kubernetesModule = "k8s.io/kubernetes"
)

const (
	goProgram    = "go"
	gccProgram   = "gcc"
	umociProgram = "umoci"
	tarProgram   = "tar"
	ctrProgram   = "ctr"
)

// image is one image to build: a single static binary as its entrypoint.
type image struct {
	ref    string
	binary string // path of the built binary
}

// buildImages builds the pause and podweb binaries and their OCI archives.
func (c *cluster) buildImages() ([]image, error) {
	dir := c.paths.images("")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	// pause.c from the Kubernetes module bench/tools pins, as upstream
	// builds it (static, no libc at run time).
	out, err := run(filepath.Join(c.cfg.RepoRoot, "bench", "tools"), nil, goProgram, "list", "-m", "-f", "{{.Dir}}", kubernetesModule)
	if err != nil {
		return nil, err
	}
	src := filepath.Join(strings.TrimSpace(out), "build", "pause", "linux", "pause.c")
	pause := filepath.Join(dir, "pause")
	if _, err := run(dir, nil, gccProgram, "-Os", "-Wall", "-static", "-DVERSION=kproxy-cluster", "-o", pause, src); err != nil {
		return nil, err
	}
	podweb := filepath.Join(dir, "podweb")
	if _, err := run(c.cfg.RepoRoot, []string{"CGO_ENABLED=0"}, goProgram, "build", "-trimpath", "-o", podweb, "./bench/cluster/cmd/podweb"); err != nil {
		return nil, err
	}
	images := []image{{ref: PauseImage, binary: pause}, {ref: PodwebImage, binary: podweb}}
	if c.cfg.CoreDNS != "" {
		images = append(images, image{ref: CoreDNSImage, binary: c.cfg.CoreDNS})
	}
	for _, im := range images {
		if err := ociArchive(im, archivePath(dir, im)); err != nil {
			return nil, err
		}
	}
	return images, nil
}

func archivePath(dir string, im image) string {
	return filepath.Join(dir, filepath.Base(im.binary)+".oci.tar")
}

// ociArchive writes an OCI archive of one layer holding im's binary at
// /NAME, its entrypoint, assembled by umoci as deploy/image/build.sh does.
func ociArchive(im image, out string) error {
	tmp, err := os.MkdirTemp("", "kproxy-cluster-image-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	name := filepath.Base(im.binary)
	layer := filepath.Join(tmp, "layer.tar")
	if err := writeLayer(layer, im.binary, name); err != nil {
		return err
	}
	layout := filepath.Join(tmp, "oci")
	const tag = "build" // umoci's tag inside the build: it cannot hold a name
	steps := [][]string{
		{"init", "--layout", layout},
		{"new", "--image", layout + ":" + tag},
		{"raw", "add-layer", "--image", layout + ":" + tag, layer},
		{"config", "--image", layout + ":" + tag, "--os=linux", "--architecture=amd64", "--config.entrypoint=/" + name},
		{"gc", "--layout", layout},
	}
	for _, s := range steps {
		if _, err := run(tmp, nil, umociProgram, s...); err != nil {
			return err
		}
	}
	// The tag becomes the image's full name, which ctr import keeps.
	index := filepath.Join(layout, "index.json")
	data, err := os.ReadFile(index)
	if err != nil {
		return fmt.Errorf("reading %s: %w", index, err)
	}
	from := `"org.opencontainers.image.ref.name":"` + tag + `"`
	if !bytes.Contains(data, []byte(from)) {
		return fmt.Errorf("%s names no image %q: %s", index, tag, data)
	}
	data = bytes.Replace(data, []byte(from), []byte(`"org.opencontainers.image.ref.name":"`+im.ref+`"`), 1)
	if err := os.WriteFile(index, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", index, err)
	}
	if _, err := run(tmp, nil, tarProgram, "--create", "--file", out, "--directory", layout, "--owner=0", "--group=0", "--numeric-owner", "."); err != nil {
		return err
	}
	return nil
}

// writeLayer writes a layer tarball holding binary as /name.
func writeLayer(path, binary, name string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	defer f.Close()
	src, err := os.Open(binary)
	if err != nil {
		return fmt.Errorf("opening %s: %w", binary, err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", binary, err)
	}
	tw := tar.NewWriter(f)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: st.Size(), Typeflag: tar.TypeReg, ModTime: st.ModTime()}); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// importImage imports an OCI archive into a node's containerd, in the
// namespace the CRI uses. The base name is the image's name without its
// tag: ctr keeps only the names the archive gives under it. The image is
// also named by its digest (name@sha256:…), as an overlay names kproxy's:
// the CRI finds an imported image only under a name it was given, and
// would try to pull the digest's name from a registry.
func (c *cluster) importImage(n Node, archive, ref string) error {
	_, digest, err := readArchiveIndex(archive)
	if err != nil {
		return err
	}
	if _, err := run("", nil, ctrProgram, "--address", n.containerdSocket(c.paths), "--namespace", "k8s.io",
		"images", "import", "--base-name", imageBase(ref), archive); err != nil {
		return err
	}
	return c.tagImage(n, ref, imageBase(ref)+"@"+digest)
}

// tagImage gives the image ref in n's containerd a further name.
func (c *cluster) tagImage(n Node, ref, name string) error {
	_, err := run("", nil, ctrProgram, "--address", n.containerdSocket(c.paths), "--namespace", "k8s.io",
		"images", "tag", "--force", ref, name)
	return err
}

// imageBase is ref without its tag: the colon after the last slash, so a
// registry's port stays.
func imageBase(ref string) string {
	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		return ref[:colon]
	}
	return ref
}

// extraArchives lists the OCI archives in Config.Images with the name each
// carries.
func (c *cluster) extraArchives() (map[string]string, error) {
	if c.cfg.Images == "" {
		return nil, nil
	}
	files, err := filepath.Glob(filepath.Join(c.cfg.Images, "*.oci.tar"))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", c.cfg.Images, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no *.oci.tar archives", c.cfg.Images)
	}
	refs := make(map[string]string, len(files))
	for _, f := range files {
		ref, err := archiveRef(f)
		if err != nil {
			return nil, err
		}
		refs[f] = ref
	}
	return refs, nil
}

// archiveRef reads the name an OCI archive's index gives its image.
func archiveRef(path string) (string, error) {
	ref, _, err := readArchiveIndex(path)
	return ref, err
}

// ArchiveDigestRef is the image of an OCI archive named by its manifest's
// digest (name@sha256:…), as an overlay names it so each build rolls out;
// make image prints the same.
func ArchiveDigestRef(path string) (string, error) {
	ref, digest, err := readArchiveIndex(path)
	if err != nil {
		return "", err
	}
	return imageBase(ref) + "@" + digest, nil
}

// readArchiveIndex reads the name and the manifest digest an OCI archive's
// index gives its image.
func readArchiveIndex(path string) (ref, digest string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", "", fmt.Errorf("%s holds no index.json: not an OCI archive", path)
		}
		if err != nil {
			return "", "", fmt.Errorf("reading %s: %w", path, err)
		}
		if filepath.Clean(h.Name) != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Digest      string            `json:"digest"`
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return "", "", fmt.Errorf("%s: index.json: %w", path, err)
		}
		for _, m := range index.Manifests {
			if ref := m.Annotations["org.opencontainers.image.ref.name"]; strings.Contains(ref, "/") {
				return ref, m.Digest, nil
			}
		}
		return "", "", fmt.Errorf("%s: index.json names no image in full", path)
	}
}

// run runs a program in dir with env added, returning its output.
func run(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// ImportImage imports an OCI archive into node n's containerd in the
// cluster whose state directory is stateDir, under ref (the name the
// archive gives its image), as Up imports kproxy's.
func ImportImage(stateDir string, n Node, archive, ref string) error {
	c := &cluster{paths: paths{dir: stateDir}}
	if err := c.importImage(n, archive, ref); err != nil {
		return fmt.Errorf("importing %s into %s: %w", archive, n.Name, err)
	}
	return nil
}
