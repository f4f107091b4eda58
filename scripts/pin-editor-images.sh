#!/usr/bin/env bash
# Pins the editor images by digest: each deploy/editors/*.Containerfile's BASE (name:tag) is
# resolved at its registry, and the reference with its digest is written where the same pin
# lives: the Containerfile, the server's default (server/src/config/kube.rs) and the chart's
# values. Run it where the registries are reachable, then `cargo test` (which checks the three
# agree) and commit.
#
#   scripts/pin-editor-images.sh            resolve and write
#   scripts/pin-editor-images.sh --check    say which pins moved at their registry (exit 1 if any)
#   scripts/pin-editor-images.sh --digest REF
#
# PIN_ROOT: the tree to edit (default: this checkout). PIN_TLS_VERIFY=false for a plain-HTTP
# registry (tests, on loopback).
set -euo pipefail
ROOT=${PIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
TLS=${PIN_TLS_VERIFY:-true}
command -v skopeo >/dev/null || { echo "pin-editor-images: needs skopeo (apt-get install skopeo)" >&2; exit 2; }

digest() { # REF: the digest of what REF names now (a multi-arch index where there is one)
  skopeo inspect --tls-verify="$TLS" --raw "docker://$1" | sha256sum | sed 's/^\([0-9a-f]*\).*/sha256:\1/'
}

if [ "${1:-}" = "--digest" ]; then
  digest "$2"
  exit
fi
check=false
[ "${1:-}" = "--check" ] && check=true
moved=0
for containerfile in "$ROOT"/deploy/editors/*.Containerfile; do
  pinned=$(sed -n 's/^ARG BASE=//p' "$containerfile")
  tagged=${pinned%@*}
  now="$tagged@$(digest "$tagged")"
  if [ "$now" = "$pinned" ]; then
    echo "pinned: $pinned"
    continue
  fi
  moved=1
  echo "moved: $pinned -> $now"
  $check && continue
  python3 - "$pinned" "$now" "$containerfile" "$ROOT/server/src/config/kube.rs" "$ROOT/deploy/chart/values.yaml" <<'EOF'
import sys
old, new, *files = sys.argv[1:]
for name in files:
    with open(name) as f:
        text = f.read()
    if old not in text:
        sys.exit(f"pin-editor-images: {name} does not hold {old}: the pins disagree (cargo test says where)")
    with open(name, "w") as f:
        f.write(text.replace(old, new))
EOF
done
$check && exit "$moved"
exit 0
