#!/usr/bin/env bash
# Builds the server image (deploy/image/server.Containerfile) FROM scratch, offline, with buildah:
# the server binary (stripped), the shared libraries it links, the built pages, CA certificates
# and a passwd entry for uid 10001. Reproducible: every file's time is the epoch and the image's
# creation time too (`--timestamp 0`), so the same build gives the same digest.
#
#   scripts/image.sh [NAME]     NAME defaults to the chart's image: <image.repository>:<version>
#   scripts/image.sh --name     prints that default name (scripts/validate-deploy.sh checks it)
#
# Takes the server from $IMAGE_SERVER_BIN (default: the release build) and the pages from
# $SANDBOX_SITE_ROOT (default target/site), which must come from the same build. Prints the image's id.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
BIN=${IMAGE_SERVER_BIN:-$TARGET/release/server}
SITE=${SANDBOX_SITE_ROOT:-$PWD/target/site}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
REPOSITORY=$(sed -n '/^image:/,/^[^ ]/s/^  repository: *//p' deploy/chart/values.yaml)
if [ "${1:-}" = --name ]; then
  echo "$REPOSITORY:$VERSION"
  exit 0
fi
NAME=${1:-$REPOSITORY:$VERSION}
[ -x "$BIN" ] || { echo "no server binary at $BIN: build it first (cargo leptos build --release)" >&2; exit 1; }
[ -f "$SITE/pkg/sandbox.js" ] || { echo "no built pages in $SITE: run cargo leptos build first" >&2; exit 1; }

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
ROOT=$STAGE/rootfs
mkdir -p "$ROOT/usr/local/bin" "$ROOT/usr/share/gpu-sandbox" "$ROOT/etc/ssl/certs" \
  "$ROOT/var/lib/gpu-sandbox" "$ROOT/tmp"
strip --strip-all -o "$ROOT/usr/local/bin/server" "$BIN"
cp -r "$SITE" "$ROOT/usr/share/gpu-sandbox/site"
# The dynamic loader and the libraries, at the paths the binary asks for them.
for lib in $(ldd "$BIN" | awk '$1 ~ /^\// { print $1 } $3 ~ /^\// { print $3 }' | sort -u); do
  mkdir -p "$ROOT$(dirname "$lib")"
  cp -L "$lib" "$ROOT$lib"
done
# Single sign-on providers and registries speak TLS.
cp -L /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/"
echo "sandbox:x:10001:10001:GPU Sandbox:/var/lib/gpu-sandbox:/nonexistent" >"$ROOT/etc/passwd"
echo "sandbox:x:10001:" >"$ROOT/etc/group"
# Same bytes, same digest: modes and times normalized (owners are root, as COPY writes them).
find "$ROOT" -type d -exec chmod 0755 {} +
find "$ROOT" -type f -exec chmod 0644 {} +
chmod 0755 "$ROOT/usr/local/bin/server" "$ROOT"/lib64/ld-linux-* 2>/dev/null || true
chmod 1777 "$ROOT/tmp"
find "$ROOT" -exec touch -h -d @0 {} +
cp deploy/image/server.Containerfile "$STAGE/Containerfile"
buildah build --quiet --timestamp 0 --layers=false --pull=never \
  -f "$STAGE/Containerfile" -t "$NAME" "$STAGE" >/dev/null
podman image inspect --format '{{.Id}}' "$NAME"
