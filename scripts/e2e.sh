#!/usr/bin/env bash
# Browser tests: serves the built site on a scratch data dir, creates a user, runs end2end/.
# Expects `cargo leptos build --split` to have run (scripts/test.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
BIN="$TARGET/debug/server"
[ -x "$BIN" ] || BIN="$TARGET/release/server"
DATA=$(mktemp -d)
PORT=${E2E_PORT:-3100}
OIDC_PORT=${E2E_OIDC_PORT:-$((PORT + 1))}
REGISTRY_PORT=${E2E_REGISTRY_PORT:-$((PORT + 2))}
export SANDBOX_DATA_DIR="$DATA" SANDBOX_LISTEN="127.0.0.1:$PORT" SANDBOX_SITE_ROOT="${SANDBOX_SITE_ROOT:-$PWD/target/site}"
export SANDBOX_LOG=${SANDBOX_LOG:-warn}
# A real OpenID Connect provider for the single sign-on test.
node end2end/oidc/provider.mjs "$OIDC_PORT" "http://127.0.0.1:$PORT/auth/oidc/callback" >"$DATA/oidc.log" 2>&1 &
PROVIDER=$!
# A real registry for the promotion test.
. scripts/registry.sh
start_registry "$DATA" "$REGISTRY_PORT"
REGISTRY=$REGISTRY_PID
SERVER=
SIM=
CLUSTER_SERVER=
cleanup() {
  kill -TERM "$PROVIDER" "$REGISTRY" 2>/dev/null || true
  if [ -n "$CLUSTER_SERVER" ]; then
    kill -TERM "$CLUSTER_SERVER" 2>/dev/null || true
    wait "$CLUSTER_SERVER" 2>/dev/null || true
  fi
  # Ctrl-C, as a person stops it: every pod and network of the simulated cluster goes.
  if [ -n "$SIM" ]; then
    kill -INT "$SIM" 2>/dev/null || true
    wait "$SIM" 2>/dev/null || true
  fi
  if [ -n "$SERVER" ]; then
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
  fi
  # Workspaces are file systems of their own (as root): unmounted, deepest first, before removal.
  local real
  real=$(realpath "$DATA")
  awk -v dir="$real/" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r point; do umount -l "$point" 2>/dev/null || true; done
  rm -rf "$DATA"
}
trap cleanup EXIT
# The default pool, plus a card in 16 GB slices whose sessions count as idle after 40 s (the
# idle test runs there while the other tests keep the default policy), a card of one 4 GB
# slice for the queue test, and a card in 12 GB slices whose sessions park after a minute.
cat >"$DATA/e2e.toml" <<TOML
[[pool.gpus]]
name = "virtual-0"
model = "Virtual 48 GB"
memory_mib = 49152
slice_mib = 8192

[[pool.gpus]]
name = "virtual-1"
model = "Virtual 32 GB"
memory_mib = 32768
slice_mib = 16384

[[pool.gpus]]
name = "virtual-2"
model = "Virtual 4 GB"
memory_mib = 4096
slice_mib = 4096

[[pool.gpus]]
name = "virtual-3"
model = "Virtual 24 GB"
memory_mib = 24576
slice_mib = 12288

[[idle.per_slice]]
slice_mib = 16384
timeout_seconds = 40
warn_seconds = 35

[[idle.per_slice]]
slice_mib = 12288
timeout_seconds = 1800
warn_seconds = 300
park_after_seconds = 60

[oidc]
issuer = "http://127.0.0.1:$OIDC_PORT"
client_id = "sandbox"
client_secret = "sandbox-secret"
redirect_url = "http://127.0.0.1:$PORT/auth/oidc/callback"
display_name = "Test IdP"
scopes = ["openid", "profile", "groups"]
# The test provider's names are fixed by the provider, not typed by its users.
username_claim = "preferred_username"
admin_groups = ["gpu-admins"]

[promotion]
registry = "http://127.0.0.1:$REGISTRY_PORT"
repository_prefix = "e2e/"
TOML
for user in e2e e2e-idle e2e-park e2e-queue e2e-queue-b e2e-target e2e-promote e2e-cs e2e-victim e2e-live e2e-data; do
  echo "e2e-password" | "$BIN" --config "$DATA/e2e.toml" user add "$user" --password-stdin >/dev/null
done
# A local admin named as one of the provider's people, whom single sign-on must not make them.
echo "e2e-password" | "$BIN" --config "$DATA/e2e.toml" user add admin --admin --password-stdin >/dev/null
"$BIN" --config "$DATA/e2e.toml" serve >"$DATA/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/login" >/dev/null && break
  sleep 0.2
done
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$OIDC_PORT/.well-known/openid-configuration" >/dev/null && break
  sleep 0.2
done
wait_registry "$REGISTRY_PORT" || { cat "$DATA/registry.log"; exit 1; }
# A second server on the simulated cluster (runtime kube): pods whose editors are real processes
# in network namespaces of their own, so as root only.
if [ "$(id -u)" = 0 ] && [ -z "${E2E_NO_CLUSTER:-}" ]; then
  CLUSTER_PORT=$((PORT + 3))
  mkdir -p "$DATA/cluster"
  # Built first, unbounded: the wait below is for the simulator's start, not for cargo (which may
  # wait on the target directory's lock while another build holds it).
  cargo build -p sim-cluster --locked
  scripts/sim-cluster.sh >"$DATA/sim-cluster.out" 2>"$DATA/sim-cluster.log" &
  SIM=$!
  for _ in $(seq 1 600); do
    [ -s "$DATA/sim-cluster.out" ] && break
    kill -0 "$SIM" 2>/dev/null || { cat "$DATA/sim-cluster.log"; exit 1; }
    sleep 0.2
  done
  [ -s "$DATA/sim-cluster.out" ] ||
    { cat "$DATA/sim-cluster.log"; echo "the simulated cluster did not start in 2 minutes" >&2; exit 1; }
  KUBECONFIG_FILE=$(head -1 "$DATA/sim-cluster.out")
  export SANDBOX_DATA_DIR="$DATA/cluster"
  echo "e2e-password" | "$BIN" user add e2e-cluster --password-stdin >/dev/null
  SANDBOX_LISTEN="127.0.0.1:$CLUSTER_PORT" SANDBOX_RUNTIME=kube SANDBOX_KUBE__SERVER_NAMESPACE=gpu-sandbox \
    KUBECONFIG="$KUBECONFIG_FILE" "$BIN" serve >"$DATA/cluster-server.log" 2>&1 &
  CLUSTER_SERVER=$!
  export SANDBOX_DATA_DIR="$DATA"
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$CLUSTER_PORT/login" >/dev/null && break
    sleep 0.2
  done
  export E2E_CLUSTER_URL="http://127.0.0.1:$CLUSTER_PORT" E2E_CLUSTER_KUBECONFIG="$KUBECONFIG_FILE"
fi
export E2E_OIDC_URL="http://127.0.0.1:$OIDC_PORT"
export E2E_REGISTRY_URL="http://127.0.0.1:$REGISTRY_PORT" E2E_DATA_DIR="$DATA" E2E_SERVER_PID="$SERVER"
export E2E_BASE_URL="http://127.0.0.1:$PORT" E2E_USER=e2e E2E_PASSWORD=e2e-password
export E2E_ARTIFACTS="$PWD/end2end/test-results"
status=0
(cd end2end && node --test --test-concurrency=1 ${E2E_TESTS:-tests/}) || status=$?
if [ $status != 0 ]; then
  echo "--- server log"; tail -50 "$DATA/server.log"
  if [ -n "$CLUSTER_SERVER" ]; then echo "--- cluster server log"; tail -30 "$DATA/cluster-server.log"; fi
fi
exit $status
