#!/usr/bin/env bash
# Builds the images upstream's sig-network conformance specs run in pods, under
# the names the e2e framework of bench/tools' Kubernetes gives them, without
# a registry: one Debian root filesystem (mmdebstrap) holding the tools the
# specs and agnhost shell out to, then one OCI archive per image name
# (umoci), which kcluster up -images imports into every node's containerd.
#
#   bench/conformance/images.sh AGNHOST_BINARY OUTPUT_DIR
#
# AGNHOST_IMAGES and BUSYBOX_IMAGES are the framework's names, separated by
# spaces (e2e.test --list-images prints them; it names more than one tag of
# each). An agnhost image runs the static agnhost binary as its entrypoint;
# a busybox image is the same filesystem with a shell as its command, which
# is all the specs ask of it (Debian's busybox-static wget crashes on this
# kernel, so the real tools stand in). The DNS specs' glibc-dns-testing
# image, which runs dig from a shell, is made the same way: pass its name
# among BUSYBOX_IMAGES. Every name gets its own archive,
# NAME-TAG.oci.tar; their layers are the same, so containerd keeps one copy.
# AGNHOST_SOURCE is agnhost's source directory, for the files upstream's
# image holds beside the binary.
# Environment: MIRROR, SUITE (as deploy/image/build.sh). Needs root and the
# Debian packages mmdebstrap and umoci.
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 AGNHOST_BINARY OUTPUT_DIR" >&2
	exit 2
fi
agnhost=$1
out=$2
mirror=${MIRROR:-http://deb.debian.org/debian}
suite=${SUITE:-bookworm}
agnhost_images=${AGNHOST_IMAGES:?names of the agnhost images e2e.test runs}
agnhost_source=${AGNHOST_SOURCE:?the source directory of agnhost (k8s.io/kubernetes/test/images/agnhost), for the files its image holds}
busybox_images=${BUSYBOX_IMAGES:?names of the busybox images e2e.test runs}
tag=build

if grep -q -a -m1 'ld-linux-x86-64.so' "$agnhost"; then
	echo "images.sh: $agnhost is dynamically linked; build it with CGO_ENABLED=0" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

packages=wget,curl,netcat-openbsd,iproute2,bind9-dnsutils,iputils-ping,procps,ca-certificates
mmdebstrap --quiet --variant=essential --include="$packages" \
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--aptopt='Acquire::Languages "none"' \
	--skip=output/dev \
	"$suite" "$tmp/rootfs.tar" "$mirror"

# What upstream's agnhost image holds beside the binary and the specs use:
# porter's TLS key pair (its HTTPS ports), netexec's upload directory and
# the agnhost-2 name the entrypoint specs run.
mkdir -p "$tmp/agnhost/uploads"
install -m 0755 "$agnhost" "$tmp/agnhost/agnhost"
ln -s agnhost "$tmp/agnhost/agnhost-2"
install -m 0644 "$agnhost_source/porter/localhost.crt" "$agnhost_source/porter/localhost.key" "$tmp/agnhost/"
tar --create --file="$tmp/agnhost.tar" --directory="$tmp/agnhost" --owner=0 --group=0 --numeric-owner \
	agnhost agnhost-2 localhost.crt localhost.key uploads

# archive REF UMOCI-CONFIG-ARGS...: the root filesystem and agnhost as two
# layers, configured and named REF, written to OUTPUT_DIR/NAME-TAG.oci.tar.
archive() {
	local ref=$1
	shift
	local name
	name=$(basename "${ref%:*}")-${ref##*:}
	local layout=$tmp/oci-$name
	umoci init --layout "$layout"
	umoci new --image "$layout:$tag"
	umoci raw add-layer --image "$layout:$tag" "$tmp/rootfs.tar"
	umoci raw add-layer --image "$layout:$tag" "$tmp/agnhost.tar"
	umoci config --image "$layout:$tag" --os=linux --architecture=amd64 \
		--config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
	umoci gc --layout "$layout"
	sed -i "s|\"org.opencontainers.image.ref.name\":\"$tag\"|\"org.opencontainers.image.ref.name\":\"$ref\"|" "$layout/index.json"
	if ! grep -qF "\"org.opencontainers.image.ref.name\":\"$ref\"" "$layout/index.json"; then
		echo "images.sh: could not name the image $ref in $layout/index.json" >&2
		exit 1
	fi
	tar --create --file="$out/$name.oci.tar.tmp" --directory="$layout" --owner=0 --group=0 --numeric-owner --sort=name .
	mv "$out/$name.oci.tar.tmp" "$out/$name.oci.tar"
}

mkdir -p "$out"
rm -f "$out"/*.oci.tar
for ref in $agnhost_images; do
	# Upstream's default command: a pod that names no args pauses.
	archive "$ref" --config.entrypoint=/agnhost --config.cmd=pause
done
for ref in $busybox_images; do
	archive "$ref" --config.cmd=sh
done
ls -l "$out"
