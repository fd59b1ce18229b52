"""What ``gpupool nodes`` does, with the declaration's parameters (declared in cli/nodes.py),
importing no Typer: the fast path runs it (cli/fastpath.py)."""

from __future__ import annotations

from typing import Any

from gpupool.cli.common import Output, client, console, print_json
from gpupool.cli.render import nodes_table


def nodes(url: str = "http://127.0.0.1:7070", output: Output = Output.TABLE) -> None:
    """List nodes, their GPUs and which jobs use them."""
    with client(url) as c:
        listing = c.nodes()
    if output is Output.JSON:
        print_json(listing)
    else:
        console.print(nodes_table(listing))
        for line in walls(listing) + image_lines(listing):
            console.print(line)


def walls(listing: list[dict[str, Any]]) -> list[str]:
    """What each node enforces around a job, one line per distinct set, so nobody believes in a
    wall that is not there."""
    by_walls: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for n in listing:
        said = {k: v for k, v in (n.get("isolation") or {}).items() if k != "images"}  # a line of its own
        if said:
            by_walls.setdefault(tuple(sorted(said.items())), []).append(n["name"])
    order = ("users", "memory", "cpus", "cpu quota", "devices", "kill", "tmp", "proc", "network")
    return [
        f"walls on {', '.join(names)}: "
        + "; ".join(f"{k} {dict(w)[k]}" if k in dict(w) else f"{k} none (not reported by this node)" for k in order)
        for w, names in by_walls.items()
    ]


def image_lines(listing: list[dict[str, Any]]) -> list[str]:
    """Whether each node runs jobs in images (``--image``) and how, or why not: one line per
    distinct answer (its cache's count and size differ from node to node more than its walls do)."""
    by_answer: dict[str, list[str]] = {}
    for n in listing:
        said = (n.get("isolation") or {}).get("images")
        if said:
            by_answer.setdefault(said, []).append(n["name"])
    return [f"images on {', '.join(names)}: {said}" for said, names in by_answer.items()]
