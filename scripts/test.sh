#!/usr/bin/env bash
# Runs every test: unit, store (SQLite and PostgreSQL), API/proxy, real editors, single sign-on
# against a real OpenID Connect provider, and the browser tests.
# Installs and starts what they need first (scripts/setup.sh --test, a local PostgreSQL).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export SANDBOX_EDITORS__TOOLS_DIR=${SANDBOX_EDITORS__TOOLS_DIR:-$ROOT/.tools}
scripts/setup.sh --test
# The deployment (deploy/): Helm renders it offline and every manifest is validated strictly.
scripts/validate-deploy.sh

# PostgreSQL for the store tests: Debian's cluster on 127.0.0.1:5432, a superuser role for tests.
if [ -z "${DATABASE_URL:-}" ]; then
  PG_VERSION=$(ls /usr/lib/postgresql | sort -n | tail -1)
  pg_lsclusters -h 2>/dev/null | grep -q "^$PG_VERSION main" || pg_createcluster "$PG_VERSION" main >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main start 2>/dev/null || true
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 && break; sleep 0.2; done
  su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname='sandbox'\"" | grep -q 1 \
    || su postgres -c "psql -qc \"CREATE ROLE sandbox LOGIN SUPERUSER PASSWORD 'sandbox'\""
  export DATABASE_URL=postgres://sandbox:sandbox@127.0.0.1:5432/postgres
fi

echo "==> cargo fmt --check and clippy -D warnings (server and app; the pages' wasm side)"
cargo fmt --all --check
cargo clippy --workspace --exclude frontend --all-targets --locked -- -D warnings
cargo clippy -p frontend --target wasm32-unknown-unknown --locked -- -D warnings

echo "==> cargo doc: no broken intra-doc links"
# Without the wasm crate, for the reason given below; its one function links nowhere.
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links" cargo doc --no-deps --workspace --exclude frontend --locked

echo "==> cargo test (unit, the folders' import order, store on SQLite + PostgreSQL, API, proxy, real editors)"
# Without the wasm crate: its `hydrate` features would otherwise be unified into the server's
# build of the pages (effects then run at render, which the server never does).
# The pin GPU sandboxes preload (libslice_pin.so), beside the binaries the tests run.
cargo build -p slice-pin --locked
cargo test --workspace --exclude frontend --locked

echo "==> cargo leptos build --split (pages + wasm, a chunk per page)"
cargo leptos build --split

echo "==> browser tests (Playwright + Chromium)"
scripts/e2e.sh

echo "==> the server image (buildah FROM scratch: reproducible, pushed, pulled by digest, run)"
scripts/image-test.sh
echo "==> the editor Containerfiles (built on a stand-in base) and their pins"
scripts/editor-images-test.sh

# Last: it rewrites target/site, which the image above took from the debug build.
echo "==> the page bundle, release build: sign-in and the dashboard at most 400 KB of wasm, gzip"
PATH="$SANDBOX_EDITORS__TOOLS_DIR/build/node_modules/.bin:$PATH" cargo leptos build --release --split --frontend-only
python3 bench/bundle.py --budget sign-in=400000 --budget dashboard=400000
