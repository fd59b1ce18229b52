"""Node commands."""

from __future__ import annotations

from gpupool.cli.common import Output, OutputOpt, UrlOpt, client, console, print_json
from gpupool.cli.render import nodes_table


def nodes(url: UrlOpt = "http://127.0.0.1:7070", output: OutputOpt = Output.TABLE) -> None:
    """List nodes, their GPUs and which jobs use them."""
    with client(url) as c:
        listing = c.nodes()
    if output is Output.JSON:
        print_json(listing)
    else:
        console.print(nodes_table(listing))
