#!/usr/bin/env bash
# Validates deploy/ offline: renders the Helm chart with Helm's own engine (the Helm Go SDK, from PyPI)
# for the default values and deploy/examples/production.yaml, then checks every object with
# `kubernetes-validate --strict` and deploy/tools/check.py (restricted security, resources, pinned images,
# RBAC scope, priority classes, config.toml). Then it proves the checks can fail: each fixture under
# deploy/tests/ must be rejected by the stage its first line names, with the text it names.
# Installs what it needs into $HOME/.cache/gpu-sandbox/deploy-venv (once). Exits non-zero on any error.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPLOY=$PWD/deploy
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest the validator knows.
KUBE_VERSIONS=(1.30.0 1.37.0)

# --- tools ---------------------------------------------------------------------------------------
. scripts/deploy-venv.sh
PY=$VENV/bin/python
KV=$VENV/bin/kubernetes-validate

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
passed=0
failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }

strict() { # FILE: kubernetes-validate --strict against each supported version
  local v
  for v in "${KUBE_VERSIONS[@]}"; do
    "$KV" --strict --quiet -k "$v" "$1" || return 1
  done
}

# --- the chart, as it would be installed ---------------------------------------------------------
echo "==> rendering deploy/chart (Helm $("$PY" -c 'import helm_python as h; print(h.helm_sdk_version())'))"
for case in default production; do
  args=()
  [ "$case" = production ] && args=(--values "$DEPLOY/examples/production.yaml")
  if "$PY" "$DEPLOY/tools/check.py" render "$DEPLOY/chart" "$OUT/$case.yaml" "${args[@]}" \
    && strict "$OUT/$case.yaml"; then
    ok "$case values: helm lint, schema, render, check.py, kubernetes-validate --strict ${KUBE_VERSIONS[*]}"
  else
    bad "$case values"
  fi
done

# --- the chart runs the image the build makes ------------------------------------------------------
built=$(scripts/image.sh --name)
ref=${CARGO_TARGET_DIR:-$PWD/target}/image/server.ref
[ -f "$ref" ] && built=$(cut -d@ -f1 "$ref")
rendered=$("$PY" -c '
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "Deployment":
        for c in doc["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "server":
                print(c["image"])
' "$OUT/default.yaml")
if [ "$rendered" = "$built" ]; then
  ok "the chart's server image is the one scripts/image.sh builds ($built)"
else
  bad "the chart deploys '$rendered' but scripts/image.sh builds '$built' (image.repository and appVersion against Cargo.toml)"
fi

# --- the server reads the configuration the chart renders -----------------------------------------
# Values a key of config.kube passes through (a CSI source's volumeAttributes) reach the server:
# the chart is rendered with them and the server's own parser reads its config.toml back.
values=$DEPLOY/tests/good-values/dataset-csi-attributes.yaml
if "$PY" "$DEPLOY/tools/check.py" render "$DEPLOY/chart" "$OUT/datasets.yaml" --values "$values" \
  && "$PY" -c '
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "ConfigMap" and "config.toml" in doc.get("data", {}):
        print(doc["data"]["config.toml"])
' "$OUT/datasets.yaml" >"$OUT/config.toml" \
  && summary=$(cargo run -q --locked -p server --bin server -- --config "$OUT/config.toml" check-config) \
  && grep -qxF 'dataset source corpus: csi smb.csi.k8s.io volume corpus attributes mountOptions=dir_mode=0555,file_mode=0444, note=a "quoted" value = kept, source=//fs.lab.internal/corpus' <<<"$summary" \
  && grep -qxF 'dataset source imagenet: nfs nfs.lab.internal:/exports/imagenet' <<<"$summary"; then
  ok "a CSI source's volumeAttributes in the values reach the server's configuration (server check-config)"
else
  bad "the chart's datasetSources with volumeAttributes: the server read back:"
  echo "${summary:-nothing}" | sed 's/^/    /'
fi

# --- the checks reject what they should ----------------------------------------------------------
expect() { # FILE: its first line, "# expect: STAGE TEXT"
  sed -n '1s/^# expect: //p' "$1"
}
for f in "$DEPLOY"/tests/fixtures/*.yaml "$DEPLOY"/tests/bad-values/*.yaml; do
  read -r stage text <<<"$(expect "$f")"
  name=${f#"$DEPLOY"/}
  set +e
  case $stage in
    kubernetes-validate) log=$(strict "$f" 2>&1) ;;
    policy) log=$("$PY" "$DEPLOY/tools/check.py" policy "$f" 2>&1) ;;
    render) log=$("$PY" "$DEPLOY/tools/check.py" render "$DEPLOY/chart" "$OUT/bad.yaml" --values "$f" 2>&1) ;;
    *) log="unknown stage '$stage'"; false ;;
  esac
  rc=$?
  set -e
  if [ "$rc" -ne 0 ] && [[ $log == *"$text"* ]]; then
    ok "$name rejected by $stage"
  else
    bad "$name: expected $stage to reject it with '$text' (exit $rc):"
    echo "$log" | sed 's/^/    /'
  fi
done

echo "validate-deploy: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
