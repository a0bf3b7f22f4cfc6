#!/usr/bin/env bash
# Builds kproxy's OCI image from Debian packages alone, without pulling a base
# image from any registry: mmdebstrap makes the root filesystem (Debian 12's
# essential packages plus the tools kproxy runs: iptables with both backends,
# nftables, ipset, conntrack, iproute2, kmod), umoci assembles an OCI image
# layout of two layers (that filesystem, then the kproxy binary) and the
# layout is written as an OCI archive (`oci-archive` tar), which
# `podman load`, `skopeo copy oci-archive:…` and `ctr images import` read.
#
#   deploy/image/build.sh KPROXY_BINARY OUTPUT.oci.tar
#
# The same recipe builds the reference kube-proxy's image for make
# conformance (NAME=kube-proxy: the binary's name in /usr/local/bin).
# KPROXY_BINARY must be static (CGO_ENABLED=0): the image has no Go runtime
# needs beyond it. Environment: MIRROR (a Debian mirror, default
# http://deb.debian.org/debian), SUITE (default bookworm), IMAGE (the name
# the archive gives the image, default localhost/kproxy:latest: `podman load`
# and `ctr images import` name it so), SOURCE_DATE_EPOCH (mmdebstrap stamps
# the filesystem with it, for reproducible layers). Needs root (mmdebstrap's
# root mode) and the Debian packages mmdebstrap and umoci. NAME is the
# binary's name in the image (default kproxy), DESCRIPTION the image's.
#
# ARCH (Debian's and OCI's name: amd64, the default, or arm64) is the image's
# architecture; KPROXY_BINARY must be built for it (GOARCH=ARCH), which is
# checked. An image for another architecture than the build machine's runs
# the packages' maintainer scripts under qemu-user emulation: it needs the
# Debian packages qemu-user-static, binfmt-support and arch-test (mmdebstrap
# checks with it that the architecture runs); binfmt_misc is mounted and
# qemu's format enabled here when the machine has not done it (a container).
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 KPROXY_BINARY OUTPUT.oci.tar" >&2
	exit 2
fi
binary=$1
output=$2
mirror=${MIRROR:-http://deb.debian.org/debian}
suite=${SUITE:-bookworm}
image=${IMAGE:-localhost/kproxy:latest}
name=${NAME:-kproxy}
description=${DESCRIPTION:-"kproxy, a drop-in for kube-proxy, on Debian $suite"}
# umoci's own tag, inside the build only (umoci tags cannot hold a name).
tag=build
arch=${ARCH:-amd64}
# What differs by architecture: the ELF machine a binary must have (e_machine,
# as od prints its two little-endian bytes), the multiarch triplet of library
# paths, the dynamic loader a non-static binary names, and qemu's name for the
# architecture (its binfmt_misc format is qemu-NAME).
case $arch in
amd64)
	elf_machine='3e 00' elf_machine_name=x86-64 triplet=x86_64-linux-gnu loader=ld-linux-x86-64.so qemu=x86_64
	;;
arm64)
	elf_machine='b7 00' elf_machine_name=aarch64 triplet=aarch64-linux-gnu loader=ld-linux-aarch64.so qemu=aarch64
	;;
*)
	echo "build.sh: ARCH=$arch is not supported; use amd64 or arm64" >&2
	exit 2
	;;
esac

if [ ! -x "$binary" ]; then
	echo "build.sh: $binary is not an executable $name binary" >&2
	exit 1
fi
# A dynamically linked binary would start on the build machine and fail in
# the image only if its libc differed: refuse it here instead.
if [ "$(head -c 4 "$binary" | od -An -c | tr -d ' ')" != '177ELF' ]; then
	echo "build.sh: $binary is not an ELF binary" >&2
	exit 1
fi
# A binary of another architecture would be copied in silently and fail only
# when a node starts the image ("exec format error"). e_machine is at byte 18
# of the ELF header; both architectures are little-endian.
machine=$(od -An -t x1 -j 18 -N 2 "$binary" | tr -s ' ' | sed 's/^ //; s/ $//')
if [ "$machine" != "$elf_machine" ]; then
	case $machine in
	'3e 00') found=x86-64 ;;
	'b7 00') found=aarch64 ;;
	*) found="e_machine $machine" ;;
	esac
	echo "build.sh: $binary is built for $found, not for $elf_machine_name as ARCH=$arch needs: build it with GOARCH=$arch" >&2
	exit 1
fi
# A dynamic binary names its loader (PT_INTERP); a static Go binary does not.
if grep -q -a -m1 "$loader" "$binary"; then
	echo "build.sh: $binary is dynamically linked; build it with CGO_ENABLED=0" >&2
	exit 1
fi

# A foreign root filesystem needs qemu-user registered with binfmt_misc, and
# with the F flag (the interpreter opened at registration), so that the
# chroot's binaries run without qemu inside it.
if [ "$arch" != "$(dpkg --print-architecture)" ]; then
	binfmt=/proc/sys/fs/binfmt_misc
	# systemd mounts it on first access; a container's /proc may not have it.
	if [ ! -e "$binfmt/status" ]; then
		echo "build.sh: mounting binfmt_misc on $binfmt, which ARCH=$arch's emulation needs" >&2
		mount -t binfmt_misc binfmt_misc "$binfmt"
	fi
	if [ ! -e "$binfmt/qemu-$qemu" ]; then
		if [ ! -e "/usr/share/binfmts/qemu-$qemu" ] || ! command -v update-binfmts >/dev/null; then
			echo "build.sh: ARCH=$arch needs qemu-user emulation: install the Debian packages qemu-user-static, binfmt-support and arch-test" >&2
			exit 1
		fi
		update-binfmts --enable "qemu-$qemu"
	fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The tools kproxy runs (.ci/programs, "The product") and the ones an operator
# reaches for on a node (kube-proxy's image carries the same set).
packages=iptables,nftables,ipset,conntrack,iproute2,kmod
# Small: no documentation, manual pages or translations (the copyright files
# stay, as Debian's licences ask); merged /usr as bookworm has it (without the
# hook apt pulls in usrmerge, and perl with it: 50M more).
mmdebstrap --quiet --variant=essential --architectures="$arch" --include="$packages" \
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/lintian/*' \
	--dpkgopt="path-exclude=/usr/lib/$triplet/gconv/*" \
	--aptopt='Acquire::Languages "none"' \
	--customize-hook='rm -f "$1/usr/share/info/dir"' \
	--skip=output/dev \
	"$suite" "$tmp/rootfs.tar" "$mirror"

# The second layer: kproxy alone, so a new kproxy changes only this layer.
mkdir -p "$tmp/kproxy/usr/local/bin"
install -m 0755 "$binary" "$tmp/kproxy/usr/local/bin/$name"
mtime=()
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
	mtime=(--mtime="@$SOURCE_DATE_EPOCH")
fi
tar --create --file="$tmp/kproxy.tar" --directory="$tmp/kproxy" --owner=0 --group=0 --numeric-owner \
	--sort=name "${mtime[@]}" usr

layout=$tmp/oci
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci raw add-layer --image "$layout:$tag" --history.created_by="mmdebstrap --variant=essential --architectures=$arch --include=$packages $suite" "$tmp/rootfs.tar"
umoci raw add-layer --image "$layout:$tag" --history.created_by="$name" "$tmp/kproxy.tar"
# The DaemonSet names the command (kproxy with its flags); the entrypoint
# makes `podman run IMAGE --version` work too.
umoci config --image "$layout:$tag" --os=linux --architecture="$arch" \
	--config.entrypoint=/usr/local/bin/$name \
	--config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	--config.label=org.opencontainers.image.title=$name \
	--config.label="org.opencontainers.image.description=$description"
umoci gc --layout "$layout"
# The tag becomes the image's full name: runtimes that load an archive name
# the image after this annotation (with only a tag, podman calls it
# localhost/TAG:TAG).
sed -i "s|\"org.opencontainers.image.ref.name\":\"$tag\"|\"org.opencontainers.image.ref.name\":\"$image\"|" "$layout/index.json"
if ! grep -qF "\"org.opencontainers.image.ref.name\":\"$image\"" "$layout/index.json"; then
	echo "build.sh: could not name the image $image in $layout/index.json:" >&2
	cat "$layout/index.json" >&2
	exit 1
fi

# The manifest's digest names this build: an overlay that refers to the image
# by it (deploy/example) rolls out each new build, which a tag does not.
digest=$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$layout/index.json")
if [ -z "$digest" ]; then
	echo "build.sh: no manifest digest in $layout/index.json" >&2
	exit 1
fi
base=$image
if [[ ${image##*/} == *:* ]]; then
	base=${image%:*}
fi

# An oci-archive is the image layout directory as a tar.
mkdir -p "$(dirname "$output")"
tar --create --file="$output.tmp" --directory="$layout" --owner=0 --group=0 --numeric-owner --sort=name "${mtime[@]}" .
mv "$output.tmp" "$output"
echo "Image $base@$digest (name it so in the images: of your overlay, deploy/example)"
