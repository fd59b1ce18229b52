#!/usr/bin/env bash
# Install gpupool into ./.venv (created if missing). `scripts/install.sh test` adds what the
# tests and linters need; `scripts/install.sh ray,examples` adds the Ray backend (gpupool up
# --backend ray, gpupool join) and torch for examples/. Safe to run again: pip only installs
# what changed. The dashboard's chart library comes from npm (dashboard/package-lock.json) into
# src/gpupool/dashboard/static/vendor/; without npm the dashboard works, without charts.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpupool needs Python 3.11 or newer")'
    "$python" -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
fi
target="."
[ -n "${1:-}" ] && target=".[$1]"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$target" 2>&1 \
    | grep -v "^WARNING: Location .* is ignored" || true
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
