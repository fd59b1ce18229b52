#!/usr/bin/env bash
# Install gpupool into ./.venv (created if missing). `scripts/install.sh test` adds what the
# tests and linters need; `scripts/install.sh ray,examples` adds the Ray backend (gpupool up
# --backend ray, gpupool join) and torch for examples/. Safe to run again: pip only installs
# what changed.
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
