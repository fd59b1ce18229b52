"""The web dashboard's static files (HTML, CSS, ES modules), served by the head under ``/ui/``.

They are package data so a wheel carries them; ``static/vendor/`` holds the chart library that
scripts/install.sh copies from npm (dashboard/package-lock.json), never fetched from a CDN: the
browser talks to the head and nothing else."""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
