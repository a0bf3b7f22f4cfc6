// Package image tests kproxy's OCI image (deploy/image, `make image`)
// without a container runtime: it reads the oci-archive as a runtime would,
// extracts the layers into a root filesystem and runs it under unshare and
// chroot on the lab's node (bench/lab), where the demo's checks must pass
// through the image's kproxy and iptables. The arm64 image (`make
// image-arm64`) it reads the same way, and checks its binaries' ELF headers
// instead of running them.
package image
