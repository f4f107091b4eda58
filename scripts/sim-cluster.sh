#!/usr/bin/env bash
# Starts the simulated cluster (server/sim-cluster) on loopback for running the product against it
# by hand, and prints the kubeconfig's path on its first line:
#   scripts/sim-cluster.sh &                      # as root: network namespaces and cgroups
#   KUBECONFIG=$PWD/target/sim-cluster.kubeconfig SANDBOX_RUNTIME=kube \
#     SANDBOX_KUBE__SERVER_NAMESPACE=gpu-sandbox scripts/run.sh
# Its nodes run the editors installed by scripts/setup.sh in place of the chart's editor images;
# a launch becomes a pod you can watch with the kubeconfig's server and token (plain HTTP and no
# discovery endpoints, so kubectl cannot talk to it; curl can):
#   curl -H "Authorization: Bearer $TOKEN" "$SERVER/api/v1/pods?watch=1"
# Ctrl-C stops it and every pod. Options after the script's name go to the program (--nodes N).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${SANDBOX_EDITORS__TOOLS_DIR:-$ROOT/.tools}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
mkdir -p "$ROOT/target"
cargo build -p sim-cluster --locked >&2
scripts/render-chart.sh >"$ROOT/target/sim-cluster-chart.json"
args=(--chart "$ROOT/target/sim-cluster-chart.json" --kubeconfig "$ROOT/target/sim-cluster.kubeconfig"
  --root "$ROOT/target/sim-cluster")
# The chart's editor images, each standing for the editors installed here.
while read -r image; do args+=(--image "$image"); done < <(
  sed -n '/^editorImages:/,/^[^ ]/s/^  [a-zA-Z]*: //p' deploy/chart/values.yaml)
for dir in "$TOOLS/venv" "$TOOLS/npm" "$("$TOOLS/venv/bin/python3" -c 'import sys; print(sys.base_prefix)')"; do
  args+=(--dir "$dir")
done
exec "$TARGET/debug/sim-cluster" "${args[@]}" "$@"
