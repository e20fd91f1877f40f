#!/usr/bin/env bash
# Assembles the pgflow-wasm OCI image offline with umoci: the static (wazero-only) binary,
# Debian's CA bundle (for handlers' HTTPS), a passwd entry for the non-root user, and
# nothing else: no shell, no libc, no package manager.
#
#   build-image.sh BINARY VERSION COMMIT LAYOUT_DIR ARCHIVE NAME:TAG
#
# LAYOUT_DIR becomes an OCI image layout with one image, NAME:TAG (one only: podman refuses
# an archive of several); ARCHIVE the same as an oci-archive tar, which `podman load -i` and
# `skopeo copy oci-archive:...` take. The layout's ref.name is the whole NAME:TAG: podman
# names a loaded image after it, and a bare tag would load as localhost/<tag>:latest.
set -euo pipefail
bin=$1 version=$2 commit=$3 layout=$4 archive=$5 ref=$6
case $ref in
*:*) ;;
*) echo "build-image.sh: NAME:TAG expected, got '$ref'" >&2; exit 2 ;;
esac
uid=65532 # the "nonroot" uid distroless images use: no meaning on the host

need() { # need COMMAND PACKAGE
	command -v "$1" >/dev/null && return
	echo "image: installing $2 from Debian" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null ||
		{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null; }
}
need umoci umoci
[ -f /etc/ssl/certs/ca-certificates.crt ] || need update-ca-certificates ca-certificates

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$layout"
tag=${ref##*:}
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci unpack --image "$layout:$tag" "$work/bundle" >/dev/null
root=$work/bundle/rootfs
install -D -m 0755 "$bin" "$root/usr/local/bin/pgflow-wasm"
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
install -d -m 0755 "$root/etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n' $uid $uid >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:%d:\n' $uid >"$root/etc/group"
# /flows holds flows.yaml and its modules (mounted, or copied by a FROM); the compiled-module
# cache and HOME are writable by the user, and an emptyDir can replace them.
install -d -m 0755 "$root/flows"
install -d -m 0755 -o $uid -g $uid "$root/home/nonroot" "$root/var/cache/pgflow-wasm"
install -d -m 1777 "$root/tmp"
umoci repack --image "$layout:$tag" "$work/bundle" >/dev/null
created=$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
umoci config --image "$layout:$tag" --tag "$tag" \
	--config.user "$uid:$uid" \
	--config.entrypoint /usr/local/bin/pgflow-wasm --config.cmd serve \
	--config.workingdir /flows \
	--config.env HOME=/home/nonroot \
	--config.env PGFLOW_WASM_FLOWS=/flows/flows.yaml \
	--config.env PGFLOW_WASM_CACHE_DIR=/var/cache/pgflow-wasm \
	--config.env PGFLOW_WASM_METRICS_ADDR=:9090 \
	--config.env PGFLOW_WASM_LOG_FORMAT=json \
	--config.exposedports 9090/tcp \
	--config.stopsignal SIGTERM \
	--created "$created" \
	--clear=config.labels \
	--config.label org.opencontainers.image.title=pgflow-wasm \
	--config.label org.opencontainers.image.version="$version" \
	--config.label org.opencontainers.image.revision="$commit"
umoci gc --layout "$layout"
# umoci keeps tags to [A-Za-z0-9_.-]; the name goes into the index's annotation afterwards.
sed -i "s|\"org.opencontainers.image.ref.name\":\"$tag\"|\"org.opencontainers.image.ref.name\":\"$ref\"|" "$layout/index.json"
grep -q "\"org.opencontainers.image.ref.name\":\"$ref\"" "$layout/index.json" ||
	{ echo "build-image.sh: could not name the image $ref in $layout/index.json" >&2; exit 1; }
rm -f "$archive"
tar -C "$layout" -cf "$archive" .
# The compressed layer is what a registry stores and a node pulls.
layer=$(find "$layout/blobs" -type f -size +1M -printf '%s\n' | sort -n | tail -1)
echo "image: $ref ($layout), archive $archive $(stat -c %s "$archive") bytes; layer $(numfmt --to=iec-i --suffix=B "$layer") compressed, rootfs $(du -sh --apparent-size "$root" | cut -f1)"
