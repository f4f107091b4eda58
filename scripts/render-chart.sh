#!/usr/bin/env bash
# Prints the Helm chart (deploy/chart), rendered as `helm template` renders it with its default values
# (release and namespace "gpu-sandbox"), as one JSON list of objects: the simulated cluster's tests
# authorize the server's requests against the RBAC it grants. Extra arguments go to check.py
# (e.g. --values FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
DEPLOY=$PWD/deploy
. scripts/deploy-venv.sh >&2
exec "$VENV/bin/python" "$DEPLOY/tools/check.py" json "$DEPLOY/chart" "$@"
