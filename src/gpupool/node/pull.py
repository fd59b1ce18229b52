"""Pulling an image from a registry (issue 32): ``skopeo copy`` into an OCI layout the cache then
unpacks as any other (``node/images.py``). Its output is the job's progress; a registry that
refuses (unauthorized, no such image) fails the job, anything else (no answer, no network) makes
it wait and try again.

Standard library only: the supervisor runs it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from gpupool.node.oci import ImageError, ImageUnavailable, Ref

# What a registry says when the image will not come however long the job waits.
REFUSALS = ("unauthorized", "denied", "not found", "manifest unknown", "name unknown", "invalid")
PULL_TIMEOUT = "1h"  # the longest one pull may take (skopeo's --command-timeout)


def skopeo_copy(skopeo: str, authfile: str | None, ref: Ref, tmp: str, progress: Callable[[str], None]) -> None:
    """Copy the registry image ``ref`` into the OCI layout ``tmp`` (tag ``latest``). A registry that
    stops answering must not keep the job starting for ever: skopeo gives up after PULL_TIMEOUT."""
    remote = f"{ref.location}@{ref.digest}" if ref.digest else f"{ref.location}:{ref.tag or 'latest'}"
    auth = ["--authfile", authfile] if authfile else []
    argv = [skopeo, "--command-timeout", PULL_TIMEOUT, "copy", *auth, f"docker://{remote}", f"oci:{tmp}:latest"]
    lines: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout or ():
            if line.strip():
                lines.append(line.strip())
                progress(f"gpupool: {lines[-1]}")
    if proc.returncode != 0:
        why = lines[-1] if lines else f"skopeo exited {proc.returncode}"
        refused = any(word in why.lower() for word in REFUSALS)  # the registry said no: that stands
        raise (ImageError if refused else ImageUnavailable)(f"cannot pull {ref.text}: {why}")
