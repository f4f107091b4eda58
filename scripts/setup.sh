#!/usr/bin/env bash
# Installs what the product needs, idempotently. Used by scripts/run.sh and scripts/test.sh.
#   setup.sh            build tools + editors
#   setup.sh --test     also what the tests need (Chromium, PostgreSQL, playwright-core)
# Editors go to $SANDBOX_EDITORS__TOOLS_DIR (default ./.tools): a Python venv (JupyterLab, marimo)
# and an npm prefix (code-server). Each editor is optional: one that fails to install is shown
# as unavailable in the product, with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${SANDBOX_EDITORS__TOOLS_DIR:-$ROOT/.tools}
mkdir -p "$TOOLS/logs"
WANT_TEST=0
[ "${1:-}" = "--test" ] && WANT_TEST=1

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "apt: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >"$TOOLS/logs/apt.log" 2>&1 \
    || { tail -20 "$TOOLS/logs/apt.log"; return 1; }
}

# --- Rust build tools -------------------------------------------------------------------------
rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown || {
  say "rustup target add wasm32-unknown-unknown"; rustup target add wasm32-unknown-unknown; }

# 0.3.8: the first whose wasm splitter reads wasm-bindgen 0.2.128+ (the pages are split per route).
if ! cargo leptos --version 2>/dev/null | grep -q "0.3.8"; then
  say "installing cargo-leptos 0.3.8 (about 25 minutes on 2 cores, once)"
  cargo install cargo-leptos --locked --version 0.3.8 --features no_downloads
fi

WB_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
if ! wasm-bindgen --version 2>/dev/null | grep -q "$WB_VERSION"; then
  say "installing wasm-bindgen-cli $WB_VERSION"
  # Without --locked: one of its locked dependency versions is not served here.
  cargo install wasm-bindgen-cli --version "$WB_VERSION"
fi

# wasm-opt for release builds: Debian's binaryen is too old (its output fails to load); npm's works.
if [ ! -x "$TOOLS/build/node_modules/.bin/wasm-opt" ]; then
  say "installing binaryen (wasm-opt) from npm"
  mkdir -p "$TOOLS/build"
  (cd "$TOOLS/build" && { [ -f package.json ] || npm init -y >/dev/null; } && npm install --silent binaryen@132 >"$TOOLS/logs/binaryen.log" 2>&1) \
    || echo "warning: binaryen install failed; release builds need wasm-opt"
fi

# --- Sandboxes: bubblewrap (each editor's own files, processes and network), pasta (its way out,
# without this machine's own services), nftables (the rules that keep it off private networks,
# metadata services and this machine's addresses), socat (marimo's socket), setpriv (util-linux) ---
if ! command -v bwrap >/dev/null || ! command -v pasta >/dev/null || ! command -v socat >/dev/null \
  || ! command -v nft >/dev/null; then
  apt_install bubblewrap passt socat nftables || echo "warning: no sandbox tools; editors will not be isolated (one user at most)"
fi

# --- Backups: Debian's restic (workspaces backed up, restored; `[backups]`, off by default) -------
if ! command -v restic >/dev/null; then
  apt_install restic || echo "warning: no restic; workspace backups will fail until it is installed"
fi

# --- Editors ----------------------------------------------------------------------------------
if [ ! -x "$TOOLS/venv/bin/jupyter-lab" ] || [ ! -x "$TOOLS/venv/bin/marimo" ]; then
  say "installing JupyterLab and marimo into $TOOLS/venv"
  # Debian splits venv's pip bootstrap into its own package.
  python3 -c 'import ensurepip' >/dev/null 2>&1 || apt_install python3-venv || true
  if python3 -m venv "$TOOLS/venv" >"$TOOLS/logs/venv.log" 2>&1; then
    "$TOOLS/venv/bin/pip" install -q --upgrade pip >"$TOOLS/logs/pip.log" 2>&1 || true
    "$TOOLS/venv/bin/pip" install -q "jupyterlab==4.6.6" >>"$TOOLS/logs/pip.log" 2>&1 \
      || echo "warning: JupyterLab install failed (see $TOOLS/logs/pip.log); it will show as unavailable"
    "$TOOLS/venv/bin/pip" install -q "marimo==0.25.2" >>"$TOOLS/logs/pip.log" 2>&1 \
      || echo "warning: marimo install failed (see $TOOLS/logs/pip.log); it will show as unavailable"
  else
    echo "warning: no Python venv (see $TOOLS/logs/venv.log; Debian: apt install python3-venv);" \
      "JupyterLab and marimo will show as unavailable"
  fi
fi

# JupyterLab set up for us: no "get notified about Jupyter news?" nor update prompt at every
# launch (the product owns updates; `--LabApp.news_url=None` alone leaves the question).
if [ -d "$TOOLS/venv/share/jupyter/lab" ]; then
  mkdir -p "$TOOLS/venv/share/jupyter/lab/settings"
  cat >"$TOOLS/venv/share/jupyter/lab/settings/overrides.json" <<'JSON'
{
  "@jupyterlab/apputils-extension:notification": { "fetchNews": "false", "checkForUpdates": false }
}
JSON
fi

if [ ! -x "$TOOLS/npm/node_modules/.bin/code-server" ] && [ "${SKIP_CODE_SERVER:-0}" != 1 ]; then
  say "installing code-server into $TOOLS/npm (a few minutes, once)"
  if apt_install libkrb5-dev libxkbfile-dev libsecret-1-dev pkg-config; then
    mkdir -p "$TOOLS/npm" "$TOOLS/tmp/rgseed"
    # code-server's ripgrep post-install downloads from GitHub, which is unreachable here; its
    # downloader looks in a cache first, so seed it with the rg binary from the npm registry.
    RGC="$TOOLS/tmp/vscode-ripgrep-cache-1.15.11"; mkdir -p "$RGC"
    if [ ! -s "$RGC/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" ]; then
      (cd "$TOOLS/tmp/rgseed" && npm pack @vscode/ripgrep-linux-x64@1.18.0 >/dev/null 2>&1 \
        && tar xzf vscode-ripgrep-linux-x64-1.18.0.tgz && cp package/bin/rg . \
        && tar czf "$RGC/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" rg) || true
    fi
    (
      cd "$TOOLS/npm"
      [ -f package.json ] || npm init -y >/dev/null
      # npm 11 runs no install scripts until approved; code-server needs its post-install.
      npm pkg set --json allowScripts.code-server=true allowScripts.argon2=true >/dev/null 2>&1 || true
      export TMPDIR="$TOOLS/tmp" npm_config_unsafe_perm=true npm_config_yes=true
      npm install code-server@4.100.3 >"$TOOLS/logs/code-server.log" 2>&1
    ) || echo "warning: code-server install failed (see $TOOLS/logs/code-server.log); it will show as unavailable"
  fi
fi

# --- Test-only --------------------------------------------------------------------------------
if [ "$WANT_TEST" = 1 ]; then
  # docker-registry: the CNCF distribution server, the promotion tests' registry on loopback;
  # prometheus: scrapes a test server and answers PromQL (its service is never started here);
  # sqlite3: the browser tests read a session's runtime handle from the server's database;
  # buildah, podman and runc: the server image is built, pushed, pulled and run (image-test.sh);
  # busybox-static and skopeo: the editor Containerfiles' stand-in base and pins (editor-images-test.sh).
  # iproute2 and curl: the network tests make test hosts of their own (ip netns, a veth pair).
  # nginx: the load balancer in front of two replicas (tests/it/replicas.rs); its service is not used.
  apt_install chromium postgresql docker-registry prometheus sqlite3 buildah podman runc busybox-static skopeo iproute2 curl nginx
  if [ ! -d end2end/node_modules/playwright-core ] || [ ! -d end2end/node_modules/oidc-provider ] \
    || [ ! -d end2end/node_modules/axe-core ]; then
    say "installing playwright-core (no browser download: Debian's Chromium is used), oidc-provider, axe-core"
    (cd end2end && npm install --silent --no-audit --no-fund >"$TOOLS/logs/end2end-npm.log" 2>&1) \
      || { tail -20 "$TOOLS/logs/end2end-npm.log"; exit 1; }
  fi
fi
say "setup done"
