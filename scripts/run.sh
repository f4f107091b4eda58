#!/usr/bin/env bash
# Runs the product on this machine: SQLite, editors as local processes, http://127.0.0.1:3000.
# First run: installs what is missing, builds (release), creates the 'admin' account and prints
# its password. Configuration: SANDBOX_* variables or --config FILE (see README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export SANDBOX_EDITORS__TOOLS_DIR=${SANDBOX_EDITORS__TOOLS_DIR:-$ROOT/.tools}
scripts/setup.sh
export PATH="$SANDBOX_EDITORS__TOOLS_DIR/build/node_modules/.bin:$PATH"
cargo leptos build --release --split
# Beside the server: what GPU sandboxes preload before HAMi-core (README: GPU slices).
cargo build --release -p slice-pin --locked
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
# Served from a copy of its own: the test command's `cargo leptos build` rewrites target/site, which
# would take the pages away from a product running meanwhile.
if [ -z "${SANDBOX_SITE_ROOT:-}" ]; then
  rm -rf "$ROOT/target/site-run.new"
  cp -r "$ROOT/target/site" "$ROOT/target/site-run.new"
  rm -rf "$ROOT/target/site-run"
  mv "$ROOT/target/site-run.new" "$ROOT/target/site-run"
  export SANDBOX_SITE_ROOT=$ROOT/target/site-run
fi
exec "$TARGET/release/server" serve "$@"
