"""API fuzzing figures (issue 15): how many requests schemathesis sends to the head's API in the
suite's fuzz test, and how long it takes. Runs that test itself (tests/e2e/test_api_fuzz.py: a
member and an admin, every operation of the head's OpenAPI document), so the figure is the one CI
pays for, and prints the count it reports with the wall time.

    .venv/bin/python benchmarks/api_fuzz.py [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from _head import machine, machine_line

ROOT = Path(__file__).resolve().parents[1]
COUNT = re.compile(r"API fuzzing: (\d+) requests as a member, (\d+) as an admin")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/e2e/test_api_fuzz.py", "-q", "-s", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    found = COUNT.search(done.stdout)
    if done.returncode != 0 or found is None:
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
        return 1
    member, admin = int(found.group(1)), int(found.group(2))
    result = {"requests": member + admin, "as_member": member, "as_admin": admin, "wall_s": round(wall, 1)}
    if args.json:
        print(json.dumps({**result, "machine": machine()}))
    else:
        print(machine_line(machine()))
        print(f"API fuzzing: {member + admin} requests ({member} as a member, {admin} as an admin) in {wall:.1f} s")
        print("  no server error, every answer on the OpenAPI document (the test fails otherwise)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
