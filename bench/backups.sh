#!/usr/bin/env bash
# Backups, restores and exports of a 1 GiB workspace of 10,000 files, with the command lines the
# server runs (runtime/restic.rs, runtime/archive.rs: restic and tar at nice 19 / ionice -c 3).
#   bench/backups.sh [files] [mib]      (defaults 10000 1024; needs ~3.5x mib of free disk)
# Then a real JupyterLab kernel's `1+1` round trip with no backup and during a first backup of the
# same workspace (bench/backup_kernel.py, with the tools' Python: scripts/setup.sh installs it).
# Two thirds of the bytes are random (models, data: incompressible), a third text (notebooks).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
FILES=${1:-10000}
MIB=${2:-1024}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/backup-bench.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
WS=$DIR/ws
export RESTIC_REPOSITORY=$DIR/repo RESTIC_PASSWORD_FILE=$DIR/password
head -c 32 /dev/urandom | base64 >"$RESTIC_PASSWORD_FILE"
LOW=(ionice -c 3 nice -n 19)
R=("${LOW[@]}" restic --cache-dir "$DIR/cache" -q)

python3 - "$WS" "$FILES" "$MIB" <<'EOF'
import os, random, sys
ws, files, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = mib * 1024 * 1024 // files
rng = random.Random(44)
line = b'{"cell_type": "code", "source": ["import torch\\n", "model.fit(x, y)\\n"], "outputs": []},\n'
for i in range(files):
    d = os.path.join(ws, f"project-{i % 50:02d}", f"run-{i % 7}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.bin" if i % 3 else f"n{i:05d}.ipynb"), "wb") as f:
        f.write(rng.randbytes(size) if i % 3 else (line * (size // len(line) + 1))[:size])
EOF

secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
du_mib() { du -sm "$1" | cut -f1; }

"${R[@]}" init --repository-version 2 >/dev/null
cd "$WS"
first=$(secs "${R[@]}" backup --host gpu-sandbox --tag user:bench --one-file-system .)
repo_first=$(du_mib "$RESTIC_REPOSITORY")
# A day's work: 100 files changed, 10 added, 10 deleted.
python3 - "$WS" <<'EOF'
import os, random, sys
ws = sys.argv[1]; rng = random.Random(45)
names = sorted(os.path.join(r, f) for r, _, fs in os.walk(ws) for f in fs)
for p in names[:100]:
    with open(p, "r+b") as f:
        f.seek(rng.randrange(max(1, os.path.getsize(p) - 4096))); f.write(rng.randbytes(4096))
for p in names[100:110]:
    os.remove(p)
for i in range(10):
    with open(os.path.join(ws, f"new-{i}.bin"), "wb") as f:
        f.write(rng.randbytes(100_000))
EOF
incremental=$(secs "${R[@]}" backup --host gpu-sandbox --tag user:bench --one-file-system .)
repo_after=$(du_mib "$RESTIC_REPOSITORY")
one_file=$(cd "$WS" && find . -name 'f00001.bin' | head -1 | sed 's/^\.//')
restore_one=$(secs "${R[@]}" restore latest --target "$DIR/one" --include "$one_file")
cmp "$DIR/one$one_file" "$WS$one_file"
restore_all=$(secs "${R[@]}" restore latest --target "$DIR/all")
diff -r "$DIR/all" "$WS" >/dev/null
rm -rf "$DIR/all"
ws_mib=$(du_mib "$WS")
t0=$(date +%s.%N)
out_bytes=$("${LOW[@]}" tar --create --file=- --use-compress-program='gzip -1' --one-file-system . | wc -c)
t1=$(date +%s.%N)
export_s=$(echo "$t1 - $t0" | bc)

printf 'workspace            %s MiB in %s files\n' "$ws_mib" "$FILES"
printf 'first backup         %.1f s  (repository %s MiB)\n' "$first" "$repo_first"
printf 'incremental backup   %.1f s  (repository %s MiB after)\n' "$incremental" "$repo_after"
printf 'restore one file     %.2f s\n' "$restore_one"
printf 'restore everything   %.1f s\n' "$restore_all"
printf 'export (tar, gzip -1) %.1f s: %.0f MiB/s of workspace, %s MiB sent\n' \
  "$export_s" "$(echo "$ws_mib / $export_s" | bc -l)" "$((out_bytes / 1048576))"
PY=${SANDBOX_EDITORS__TOOLS_DIR:-$HERE/../.tools}/venv/bin/python
"$PY" "$HERE/backup_kernel.py" "$WS" "$DIR"
