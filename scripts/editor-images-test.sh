#!/usr/bin/env bash
# The editor Containerfiles (deploy/editors/), built offline: the official bases cannot be pulled
# from this machine, so each file is built with buildah on a stand-in base (busybox, FROM
# scratch) passed as BASE, and the image is checked for what the file adds: the numeric user,
# /workspace as HOME and working directory (writable by that user, with and without a volume),
# and the labels that state the contract. That the labels and the bases agree with the server's
# pods and defaults is checked by `cargo test` (runtime::kube::objects). Then
# scripts/pin-editor-images.sh pins a base by digest, against a real registry on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
STANDIN=localhost/gsb-test/busybox-base
REGISTRY_PORT=${EDITOR_IMAGES_REGISTRY_PORT:-3160}
REGISTRY_PID=
BUILT=()
cleanup() {
  [ -n "$REGISTRY_PID" ] && kill "$REGISTRY_PID" 2>/dev/null
  podman rmi -f "${BUILT[@]}" "$STANDIN" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "editor images test FAILED: $*" >&2; exit 1; }
busybox=$(command -v busybox) || fail "no busybox; scripts/setup.sh --test installs busybox-static"
# The stand-in image holds nothing but this binary: it must need no shared library.
! ldd "$(readlink -f "$busybox")" >/dev/null 2>&1 || fail "$busybox is not static (busybox-static is)"

mkdir -p "$WORK/base/rootfs/bin"
cp "$(readlink -f "$busybox")" "$WORK/base/rootfs/bin/busybox"
cat >"$WORK/base/Containerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ENV PATH=/bin
EOF
# chroot isolation: buildah's RUN needs no OCI runtime then. Its re-exec seals a memfd copy of
# itself, which the kernel now and then refuses with EBUSY on a busy machine (seen once in CI);
# that one error is retried, anything else fails at once.
build() { # ARGS...: buildah build, quiet
  local attempt err
  for attempt in 1 2 3; do
    if err=$(buildah build --quiet --isolation chroot "$@" 2>&1 >/dev/null); then return 0; fi
    grep -q 'sealing memfd' <<<"$err" || break
    echo "buildah: memfd sealing refused (attempt $attempt), building again" >&2
  done
  echo "$err" >&2
  return 1
}
build -f "$WORK/base/Containerfile" -t "$STANDIN" "$WORK/base" || fail "the stand-in base does not build"

run() { # IMAGE ARGS...: as podman runs the server image here (runc, limits this machine grants)
  podman run --rm --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$@"
}
label() { podman image inspect --format "{{index .Labels \"$2\"}}" "$1"; }

for containerfile in deploy/editors/*.Containerfile; do
  editor=$(basename "$containerfile" .Containerfile)
  image=localhost/gsb-test/$editor
  build --build-arg "BASE=$STANDIN" -f "$containerfile" -t "$image" deploy/editors ||
    fail "$containerfile does not build"
  BUILT+=("$image")
  [ "$(label "$image" dev.gpu-sandbox.editor)" = "$editor" ] || fail "$editor: editor label"
  [ "$(label "$image" org.opencontainers.image.base.name)" = "$STANDIN" ] ||
    fail "$editor: the base label does not name the base it was built on"
  user=$(label "$image" dev.gpu-sandbox.user)
  workspace=$(label "$image" dev.gpu-sandbox.workspace)
  [ -n "$(label "$image" dev.gpu-sandbox.readiness-path)" ] || fail "$editor: no readiness-path label"
  [ "$(podman image inspect --format '{{.Config.User}}' "$image")" = "$user" ] ||
    fail "$editor: USER is not the labelled $user"
  [ "$(podman image inspect --format '{{.Config.WorkingDir}}' "$image")" = "$workspace" ] ||
    fail "$editor: WORKDIR is not the labelled $workspace"
  # As the image's own user, no volume: the directory the file made.
  seen=$(run "$image" sh -c 'echo "$(id -u):$(id -g) $HOME $(pwd)"; touch "$HOME/probe" && echo writable')
  [ "$seen" = "$user $workspace $workspace
writable" ] || fail "$editor: in the image: $seen"
  # With a volume at the workspace owned as fsGroup leaves it on a cluster.
  mkdir -p "$WORK/volume-$editor"
  chown "$user" "$WORK/volume-$editor"
  chmod 2775 "$WORK/volume-$editor"
  run -v "$WORK/volume-$editor:$workspace" "$image" sh -c 'echo saved > "$HOME/notebook.py"' ||
    fail "$editor: the user cannot write to a volume at $workspace"
  [ "$(stat -c %u:%g "$WORK/volume-$editor/notebook.py")" = "$user" ] ||
    fail "$editor: a file saved on the volume is not the user's"
  echo "ok: $containerfile builds; runs as $user in $workspace (HOME), writes there with and without a volume"
done

# Pinning: the stand-in base served by a registry under a tag; the pin script finds the digest
# the registry gave it and writes it into a copy of the three places the pin lives.
. scripts/registry.sh
start_registry "$WORK" "$REGISTRY_PORT"
wait_registry "$REGISTRY_PORT" || { cat "$WORK/registry.log" >&2; fail "the registry never answered"; }
tagged=127.0.0.1:$REGISTRY_PORT/gsb-test/busybox-base:1.36
buildah push --quiet --tls-verify=false --digestfile "$WORK/pushed" "$STANDIN" "docker://$tagged"
export PIN_TLS_VERIFY=false
[ "$(scripts/pin-editor-images.sh --digest "$tagged")" = "$(cat "$WORK/pushed")" ] ||
  fail "pin-editor-images.sh --digest does not give the digest the registry holds"
tree=$WORK/tree
mkdir -p "$tree/deploy/editors" "$tree/deploy/chart" "$tree/server/src/config"
sed "s|^ARG BASE=.*|ARG BASE=$tagged|" deploy/editors/marimo.Containerfile >"$tree/deploy/editors/marimo.Containerfile"
printf 'editorImages:\n  marimo: %s\n' "$tagged" >"$tree/deploy/chart/values.yaml"
printf 'marimo: "%s".into(),\n' "$tagged" >"$tree/server/src/config/kube.rs"
PIN_ROOT=$tree scripts/pin-editor-images.sh --check >/dev/null && fail "--check saw no pin to make"
PIN_ROOT=$tree scripts/pin-editor-images.sh >/dev/null
pinned="$tagged@$(cat "$WORK/pushed")"
for f in deploy/editors/marimo.Containerfile deploy/chart/values.yaml server/src/config/kube.rs; do
  grep -qF "$pinned" "$tree/$f" || fail "pin-editor-images.sh did not pin $f"
done
PIN_ROOT=$tree scripts/pin-editor-images.sh --check >/dev/null || fail "--check after pinning says a pin moved"
echo "ok: pin-editor-images.sh pins a base by the digest its registry serves, in all three places"
