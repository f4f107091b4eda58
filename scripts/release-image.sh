#!/usr/bin/env bash
# Builds the release server image and pushes it: scripts/release-image.sh REGISTRY/PREFIX
# e.g. `scripts/release-image.sh registry.example.com/gpu-sandbox` pushes
# registry.example.com/gpu-sandbox/server:<version> and prints its digest. Pushing authenticates
# as buildah does (`buildah login REGISTRY` first).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 REGISTRY/PREFIX (e.g. registry.example.com/gpu-sandbox)" >&2; exit 2; }
export SANDBOX_EDITORS__TOOLS_DIR=${SANDBOX_EDITORS__TOOLS_DIR:-$PWD/.tools}
export PATH="$SANDBOX_EDITORS__TOOLS_DIR/build/node_modules/.bin:$PATH"
cargo leptos build --release --split
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
NAME=$(scripts/image.sh --name)
IMAGE_SERVER_BIN="$TARGET/release/server" scripts/image.sh "$NAME" >/dev/null
DEST="${1%/}/${NAME##*/}"
DIGEST=$(mktemp)
trap 'rm -f "$DIGEST"' EXIT
buildah push --digestfile "$DIGEST" "$NAME" "docker://$DEST"
echo "$DEST@$(cat "$DIGEST")"
