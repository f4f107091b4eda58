#!/usr/bin/env bash
# The project's benchmark (see BENCHMARKS.md): launch latency per editor, proxy throughput,
# WebSocket round trips, server memory, each beside its reference measured in the same run.
#
#   bash bench/run.sh                      # everything (5-10 minutes on 2 cores)
#   BENCH_ONLY=http,ws bash bench/run.sh   # parts: cold, memory, http, ws, kernel, warm
#   BENCH_ONLY=warm bash bench/run.sh      # warm vs cold launch vs JupyterHub's spawn (installs the hub)
#   SKIP_BUILD=1 bash bench/run.sh        # use the release binary already built
#   SERVER_BIN=/path/to/server bash bench/run.sh   # use that binary
#   BENCH_COLD_N=10 BENCH_ROUNDS=3 BENCH_WRK_DUR=10s BENCH_WS_ROUNDS=9 BENCH_WS_N=2000 BENCH_WS_BLOCK=100   # the defaults
#   BENCH_CS_N=5 bash bench/run.sh        # fewer code-server launches (default: BENCH_COLD_N)
#
# Needs: the editors (scripts/setup.sh; SANDBOX_EDITORS__TOOLS_DIR or .tools or
# ~/.cache/gpu-sandbox/tools), wrk and nginx (apt), node/npm (for configurable-http-proxy, installed
# here on first use into ~/.cache/gpu-sandbox/bench/chp; CHP_BIN=... to use another, CHP_BIN= to skip).
# Everything listens on 127.0.0.1 and is stopped at the end. Results: $BENCH_OUT (default
# ~/.cache/gpu-sandbox/bench/results/<time>/: summary.txt, results.json, logs/).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${BENCH_CACHE:-$HOME/.cache/gpu-sandbox/bench}

# --- editors
if [ -n "${SANDBOX_EDITORS__TOOLS_DIR:-}" ]; then TOOLS=$SANDBOX_EDITORS__TOOLS_DIR
elif [ -x "$ROOT/.tools/venv/bin/python" ]; then TOOLS=$ROOT/.tools
else TOOLS=$HOME/.cache/gpu-sandbox/tools; fi
TOOLS=$(cd "$TOOLS" && pwd)
BENCH_PYTHON=$TOOLS/venv/bin/python
"$BENCH_PYTHON" -c 'import websockets, psutil' 2>/dev/null || {
  echo "need $BENCH_PYTHON with websockets and psutil (scripts/setup.sh installs JupyterLab, which brings both)"; exit 1; }

# --- wrk, nginx
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v nginx >/dev/null || missing+=(nginx-light)
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> apt: ${missing[*]}"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- configurable-http-proxy (the peer's proxy, same version as the peer benchmark)
if [ -z "${CHP_BIN+set}" ]; then
  CHP_BIN=$CACHE/chp/node_modules/.bin/configurable-http-proxy
  [ -x "$CHP_BIN" ] || [ ! -x "$HOME/.cache/peer-bench/chp/node_modules/.bin/configurable-http-proxy" ] \
    || CHP_BIN=$HOME/.cache/peer-bench/chp/node_modules/.bin/configurable-http-proxy
  if [ ! -x "$CHP_BIN" ]; then
    echo "==> npm: configurable-http-proxy@5.3.0 into $CACHE/chp"
    mkdir -p "$CACHE/chp"
    (cd "$CACHE/chp" && { [ -f package.json ] || npm init -y >/dev/null; } \
      && npm install --silent configurable-http-proxy@5.3.0 >/dev/null) \
      || { echo "CHP install failed; CHP_BIN= bash bench/run.sh runs without it"; exit 1; }
  fi
fi

# --- JupyterHub, the peer whose spawn the warm launches are measured beside (same versions as
# the peer benchmark in /work/shared/bench); HUB_VENV= to skip it
if [[ ",${BENCH_ONLY:-}," == *,warm,* ]] && [ -z "${HUB_VENV+set}" ]; then
  HUB_VENV=$CACHE/hub/venv
  if [ ! -x "$HUB_VENV/bin/jupyterhub-singleuser" ]; then
    echo "==> pip: jupyterhub 6.1.1 and jupyterlab 4.6.6 into $HUB_VENV"
    python3 -m venv "$HUB_VENV"
    "$HUB_VENV/bin/pip" install -q jupyterhub==6.1.1 jupyterlab==4.6.6 \
      || { echo "JupyterHub install failed; HUB_VENV= bash bench/run.sh runs without it"; exit 1; }
  fi
fi
HUB_VENV=${HUB_VENV:-}

# --- the server (release; the pages are not needed here)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
if [ -n "${SERVER_BIN:-}" ]; then
  BUILT="given: $SERVER_BIN"
else
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "==> cargo build --release -p server"
    cargo build --release -p server --quiet
  fi
  SERVER_BIN=$CARGO_TARGET_DIR/release/server
  BUILT="working tree at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD -- app server 2>/dev/null || echo ' plus uncommitted changes')"
fi
BENCH_OUT=${BENCH_OUT:-$CACHE/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$BENCH_OUT"
# a copy, so that another build into the same target directory cannot swap it mid-run
cp "$SERVER_BIN" "$BENCH_OUT/server"
SERVER_BIN=$BENCH_OUT/server
trap 'rm -f "$BENCH_OUT/server"' EXIT
{
  echo "server: $BUILT (sha256 $(sha256sum "$SERVER_BIN" | cut -c1-12))"
  echo "jupyterlab $("$TOOLS/venv/bin/jupyter-lab" --version 2>/dev/null)"
  echo "marimo $("$TOOLS/venv/bin/marimo" --version 2>/dev/null)"
  echo "code-server $(HOME=$BENCH_OUT "$TOOLS/npm/node_modules/.bin/code-server" --version 2>/dev/null | grep -E "^[0-9]" | head -1 | awk "{print \$1}")"
  echo "configurable-http-proxy $([ -n "$CHP_BIN" ] && "$CHP_BIN" --version 2>/dev/null)"
  echo "websockets $("$BENCH_PYTHON" -c 'import websockets; print(websockets.__version__)')"
  echo "$(nginx -v 2>&1 | sed 's/.*: //'), wrk $(wrk --version 2>&1 | head -1 | awk '{print $2}'), $(nproc) CPUs, kernel $(uname -r)"
} > "$BENCH_OUT/versions.txt"
cat "$BENCH_OUT/versions.txt"

[ -z "$HUB_VENV" ] || echo "jupyterhub $("$HUB_VENV/bin/jupyterhub" --version 2>/dev/null)" >> "$BENCH_OUT/versions.txt"
export SERVER_BIN TOOLS CHP_BIN BENCH_OUT BENCH_PYTHON HUB_VENV
"$BENCH_PYTHON" "$ROOT/bench/bench.py"
echo "(results: $BENCH_OUT/summary.txt, results.json, logs/)"
