#!/usr/bin/env bash
# Make sure Debian's Chromium is at /usr/bin/chromium: the dashboard test (tests/e2e/test_dashboard.py)
# drives it headless through Playwright. Playwright's own browser download is never used: it
# fetches from outside the package mirror and would pin a second browser build.
#
#   scripts/chromium.sh    nothing to do if /usr/bin/chromium exists; otherwise installs Debian's
#                          `chromium` package with apt-get (root only) or says what to do
set -euo pipefail

CHROMIUM=/usr/bin/chromium

log() { printf 'chromium.sh: %s\n' "$*" >&2; }
die() {
    log "$*"
    exit 1
}

if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    die "no $CHROMIUM and not running as root, so cannot install it; install Debian's chromium package (sudo apt-get install chromium)"
fi
command -v apt-get >/dev/null 2>&1 || die "no $CHROMIUM and no apt-get to install it"
log "no $CHROMIUM found; installing Debian's chromium package"
apt-get update >&2 || die "apt-get update failed"
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-dejavu-core >&2 ||
    die "apt-get install chromium failed"
[ -x "$CHROMIUM" ] || die "chromium installed, but still no $CHROMIUM"
log "installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
