package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// outsidePaths are the paths outside the state directory that the cluster's
// daemons create and no setting moves: containerd's shim sockets, libcni's
// result cache, the kubelets' device-plugin socket and container log links,
// the directory kproxy's DaemonSet mounts as /lib/modules (the hostPath must
// exist), and the iptables lock it mounts.
func outsidePaths() []string {
	return []string{"/run/containerd", "/var/lib/cni", "/var/lib/kubelet", "/var/log/containers", "/lib/modules", "/run/xtables.lock"}
}

// kernelTunables are the host-wide (not per-namespace) settings a kubelet
// writes at start, as /proc/sys paths: recorded by Up, restored by Down.
func kernelTunables() []string {
	return []string{
		"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	}
}

// hostState is what Up found on the host, for Down to put back.
type hostState struct {
	// Created lists the outsidePaths that did not exist before Up.
	Created []string `json:"created"`
	// Tunables holds the kernelTunables' values before the kubelets ran.
	Tunables map[string]string `json:"tunables"`
}

func hostStateFile(stateDir string) string { return filepath.Join(stateDir, "host-state.json") }

// recordHost notes which outside paths are missing and the tunables'
// values, and makes the directory the DaemonSet's hostPath needs.
func recordHost(stateDir string) error {
	s := hostState{Tunables: map[string]string{}}
	for _, p := range outsidePaths() {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			s.Created = append(s.Created, p)
		} else if err != nil {
			return fmt.Errorf("checking %s: %w", p, err)
		}
	}
	for _, k := range kernelTunables() {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return fmt.Errorf("reading %s: %w", k, err)
		}
		s.Tunables[k] = strings.TrimSpace(string(v))
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the host state: %w", err)
	}
	if err := os.WriteFile(hostStateFile(stateDir), data, 0o644); err != nil {
		return fmt.Errorf("writing the host state: %w", err)
	}
	if err := os.MkdirAll("/lib/modules", 0o755); err != nil {
		return fmt.Errorf("creating /lib/modules: %w", err)
	}
	return nil
}

// restoreHost puts back what recordHost noted. No record: nothing to do.
func restoreHost(stateDir string) error {
	data, err := os.ReadFile(hostStateFile(stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the host state: %w", err)
	}
	var s hostState
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("decoding %s: %w", hostStateFile(stateDir), err)
	}
	var errs []error
	for k, v := range s.Tunables {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", k, err))
		}
	}
	for _, p := range s.Created {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
