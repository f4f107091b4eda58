#!/usr/bin/env bash
# The server image, end to end, offline: built twice from the same binaries it has the same id
# (reproducible); pushed to a real registry on loopback (Debian's docker-registry) and pulled
# back by its digest; run as a container (podman, read-only root, uid 10001, no shell in the
# image) until /api/v1/health answers. Where this machine cannot run containers it runs the
# image's unpacked filesystem instead, read-only under bubblewrap. Expects `cargo leptos build`.
# Prints the figures BENCHMARKS.md keeps (size, build time, time to healthy).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${IMAGE_TEST_PORT:-3150}
REGISTRY_PORT=$((PORT + 1))
WORK=$(mktemp -d)
NAME=$(scripts/image.sh --name)
# The server the test command built, beside its pages (a release build in the target directory
# may be another commit's).
export IMAGE_SERVER_BIN=${CARGO_TARGET_DIR:-$PWD/target}/debug/server
REPO=127.0.0.1:$REGISTRY_PORT/${NAME%:*}
REGISTRY=
CONTAINER=
cleanup() {
  [ -n "$CONTAINER" ] && podman rm -f "$CONTAINER" >/dev/null 2>&1
  [ -n "$REGISTRY" ] && kill "$REGISTRY" 2>/dev/null
  podman rmi -f "$NAME-again" "$REPO@$(cat "$WORK/digest" 2>/dev/null)" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "image test FAILED: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }

start=$(now)
first=$(scripts/image.sh "$NAME")
built_s=$(since "$start")
start=$(now)
again=$(scripts/image.sh "$NAME-again")
rebuilt_s=$(since "$start")
[ "$first" = "$again" ] || fail "two builds of the same binaries differ: $first vs $again"
echo "ok: reproducible, both builds are image $first"
size=$(podman image inspect --format '{{.Size}}' "$NAME")

. scripts/registry.sh
start_registry "$WORK" "$REGISTRY_PORT"
REGISTRY=$REGISTRY_PID
wait_registry "$REGISTRY_PORT" || { cat "$WORK/registry.log" >&2; fail "the registry never answered"; }
buildah push --quiet --tls-verify=false --digestfile "$WORK/digest" "$NAME" "docker://$REPO:${NAME##*:}"
digest=$(cat "$WORK/digest")
echo "ok: pushed $REPO:${NAME##*:} ($digest)"
# Gone from here: what runs next is what the registry serves, named by digest.
podman rmi -f "$NAME-again" >/dev/null
podman pull --quiet --tls-verify=false "$REPO@$digest" >/dev/null
pulled=$(podman image inspect --format '{{.Id}}' "$REPO@$digest")
[ "$pulled" = "$first" ] || fail "pulled $pulled, pushed $first"
echo "ok: pulled back by digest"

mkdir -p "$WORK/data"
chown 10001:10001 "$WORK/data"
healthy() {
  for _ in $(seq 1 1200); do
    curl -sf "http://127.0.0.1:$PORT/api/v1/health" | grep -q '"ok"' && return 0
    sleep 0.1
  done
  return 1
}
start=$(now)
# runc, not Debian's default crun (which cannot set up cgroups in this machine's hybrid mode),
# and limits no higher than this machine grants a process.
if CONTAINER=$(podman run -d --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
  --read-only --network host --tmpfs /tmp -v "$WORK/data:/var/lib/gpu-sandbox" \
  -e SANDBOX_LISTEN="127.0.0.1:$PORT" "$REPO@$digest" 2>"$WORK/run.log"); then
  how="podman run (read-only root, uid $(podman inspect --format '{{.Config.User}}' "$CONTAINER"))"
  healthy || { podman logs "$CONTAINER" >&2; fail "the server in the container never answered /api/v1/health"; }
else
  cat "$WORK/run.log" >&2
  CONTAINER=
  mount=$(podman image mount "$REPO@$digest")
  bwrap --ro-bind "$mount" / --proc /proc --dev /dev --tmpfs /tmp \
    --bind "$WORK/data" /var/lib/gpu-sandbox --unshare-all --share-net --die-with-parent \
    --clearenv --setenv PATH /usr/local/bin --setenv SANDBOX_SITE_ROOT /usr/share/gpu-sandbox/site \
    --setenv SANDBOX_DATA_DIR /var/lib/gpu-sandbox --setenv SANDBOX_LISTEN "127.0.0.1:$PORT" \
    server serve >"$WORK/server.log" 2>&1 &
  how="the unpacked image under bubblewrap (podman run failed here)"
  healthy || { cat "$WORK/server.log" >&2; fail "the server from the image never answered /api/v1/health"; }
fi
healthy_s=$(since "$start")
# The pages come from the image too.
curl -sf "http://127.0.0.1:$PORT/pkg/sandbox.js" >/dev/null || fail "the image serves no pages"
echo "ok: the server from the image answers /api/v1/health, through $how"
echo "image: $NAME size=$((size / 1024 / 1024)) MiB build=${built_s}s rebuild=${rebuilt_s}s healthy_after=${healthy_s}s digest=$digest"
mkdir -p "${CARGO_TARGET_DIR:-target}/image"
echo "$NAME@$digest" >"${CARGO_TARGET_DIR:-target}/image/server.ref"
