"""The one rule for names people give projects and users: a letter or digit, then letters, digits,
'.', '_' or '-', 63 at most. Apart from ``projects`` so that checking a job's project name (every
submission, in the CLI too) does not load the project types."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
