#!/usr/bin/env python3
"""The page bundle's size per page: the wasm a browser fetches to show each page, gzip -9.

A page loads the main module (the sign-in page needs nothing else) and, for a lazy route, the
chunks `__wasm_split_manifest.json` lists for it, its own `split_*` module among them. Reads a
built site's pkg folder (default target/site/pkg; `cargo leptos build --release --split` makes
it). `--budget PAGE=BYTES` (repeatable) fails when a page's gzip size is over its budget; and it
fails when the splitter kept every page's data in the main module (its fallback when its layout
overflows).
"""
import argparse
import gzip
import json
import pathlib
import re
import sys


def gz(path: pathlib.Path) -> int:
    return len(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))


def leb(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def has_data(path: pathlib.Path) -> bool:
    """Whether the module brings data of its own: a data segment that is not empty."""
    data, at = path.read_bytes(), 8
    while at < len(data):
        section = data[at]
        size, at = leb(data, at + 1)
        if section == 11:
            count, cursor = leb(data, at)
            for _ in range(count):
                flags, cursor = leb(data, cursor)
                if flags == 2:
                    _, cursor = leb(data, cursor)
                if flags in (0, 2):
                    cursor = data.index(0x0B, cursor) + 1
                length, cursor = leb(data, cursor)
                if length:
                    return True
                cursor += length
            return False
        at += size
    return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("pkg", nargs="?", default="target/site/pkg")
    parser.add_argument("--budget", action="append", default=[], metavar="PAGE=BYTES")
    args = parser.parse_args()
    pkg = pathlib.Path(args.pkg)
    mains = [p for p in pkg.glob("*.wasm") if not re.match(r"(chunk_|split_)", p.name)]
    if len(mains) != 1:
        sys.exit(f"expected one main module in {pkg}, found {[p.name for p in mains]}")
    main_module = mains[0]
    manifest_path = pkg / "__wasm_split_manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    main_raw, main_gz = main_module.stat().st_size, gz(main_module)
    rows = {"sign-in": (main_raw, main_gz)}
    split_modules = set()
    for key, parts in sorted(manifest.items()):
        page = re.sub(r"^__|_route_view_\d+$", "", key)
        files = [pkg / f"{part}.wasm" for part in parts]
        missing = [f.name for f in files if not f.exists()]
        if missing:
            sys.exit(f"{page}: the manifest names files that are not there: {missing}")
        split_modules.update(f for f in files if f.name.startswith("split_"))
        rows[page] = (
            main_raw + sum(f.stat().st_size for f in files),
            main_gz + sum(gz(f) for f in files),
        )
    print(f"{'page':<12}{'raw bytes':>12}{'gzip -9 bytes':>16}")
    for page, (raw, packed) in rows.items():
        print(f"{page:<12}{raw:>12,}{packed:>16,}")
    failures = []
    if split_modules and not any(has_data(f) for f in split_modules):
        failures.append(
            "no page's module has data of its own: the splitter kept every page's data in the "
            "main module (see SPLIT_SLACK in frontend/src/lib.rs)"
        )
    for budget in args.budget:
        page, _, limit = budget.partition("=")
        if page not in rows:
            failures.append(f"no page {page!r} was built (pages: {', '.join(rows)})")
        elif rows[page][1] > int(limit):
            failures.append(f"{page} is {rows[page][1]:,} bytes gzip, over its {int(limit):,}")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
