#!/usr/bin/env bash
# Install gpupool into ./.venv (created if missing). `scripts/install.sh test` adds what the
# tests and linters need; `scripts/install.sh ray,examples` adds the Ray backend (gpupool up
# --backend ray, gpupool join) and torch for examples/. Safe to run again: only what changed is
# installed. The installer is uv (from PyPI, into .venv), which downloads, unpacks and compiles in
# parallel: this script's cold run with the test extras (no caches) took 47-52 s instead of pip's
# 108-121 s here; pip does it where uv cannot be had. uv reads no pip configuration, so pip's
# find-links (where this kind of machine keeps its CPU build of torch) are passed to it. The
# dashboard's chart library comes from npm (dashboard/package-lock.json) into
# src/gpupool/dashboard/static/vendor/; without npm the dashboard works, without charts.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpupool needs Python 3.11 or newer")'
    "$python" -m venv .venv
fi
target="."
[ -n "${1:-}" ] && target=".[$1]"
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install --quiet --disable-pip-version-check uv 2>&1 \
    | grep -v "^WARNING: Location .* is ignored" || true
if [ -x .venv/bin/uv ]; then
    links=()
    for dir in ${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)}; do
        links+=(--find-links "$dir")
    done
    # --compile-bytecode: pip's default, and needed where PYTHONDONTWRITEBYTECODE is set (every
    # process would otherwise compile torch, Ray and FastAPI from source at each import).
    .venv/bin/uv pip install --quiet --python .venv/bin/python --compile-bytecode "${links[@]}" -e "$target"
else
    echo "install.sh: uv could not be installed; installing with pip" >&2
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$target" 2>&1 \
        | grep -v "^WARNING: Location .* is ignored" || true
fi
.venv/bin/python -c 'import gpupool' || { echo "install.sh: gpupool did not install" >&2; exit 1; }

# The dashboard's chart library: pinned in dashboard/package-lock.json, served by the head from
# static/vendor/ so the browser never fetches anything from outside the head.
vendor=src/gpupool/dashboard/static/vendor
if ! command -v npm >/dev/null 2>&1; then
    echo "install.sh: WARNING: npm not found, so the dashboard will have no charts (install npm and run scripts/install.sh again)" >&2
elif ! (cd dashboard && npm ci --silent --no-audit --no-fund >/dev/null 2>&1); then
    echo "install.sh: WARNING: npm ci failed in dashboard/ (run it there to see why), so the dashboard may have no charts" >&2
else
    mkdir -p "$vendor"
    cp dashboard/node_modules/uplot/dist/uPlot.iife.min.js dashboard/node_modules/uplot/dist/uPlot.min.css \
        dashboard/node_modules/uplot/LICENSE "$vendor/"
fi
