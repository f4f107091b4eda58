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
cargo leptos build --release
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
export SANDBOX_SITE_ROOT=${SANDBOX_SITE_ROOT:-$ROOT/target/site}
exec "$TARGET/release/server" serve "$@"
