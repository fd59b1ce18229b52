"""Image commands (issue 32): `gpupool images` lists what each node's cache holds; an admin's
`gpupool image import FILE [--name NAME]` puts an OCI archive on every node under a name jobs give
as ``--image NAME``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.common import Output, client, console, print_json, resolve_token
from gpupool.cli.opts import OutputOpt, UrlOpt
from gpupool.cli.tables import Col, Listing
from gpupool.domain.resources import format_bytes

IMPORT_TIMEOUT_S = 1800.0  # every node unpacks the whole archive before the head answers

image_app = typer.Typer(help="Put OCI images on the nodes for jobs to run in (--image).", no_args_is_help=True)

IMAGE_COLUMNS = (
    Col("NODE"),
    Col("NAMES", wrap=True),
    Col("DIGEST"),
    Col("SIZE", justify="right"),
    Col("LAST USED", drop=1),
    Col("BUSY", drop=2),
)


def images(url: UrlOpt = "http://127.0.0.1:7070", output: OutputOpt = Output.TABLE) -> None:
    """List the images each node holds: what jobs can start in at once, without a pull or an unpack."""
    with client(url) as c:
        listing = c.images()
    if output is Output.JSON:
        print_json(listing)
        return
    if listing["images"]:
        console.print(images_table(listing["images"]))
    else:
        console.print(
            "no node holds an image yet: an admin imports one with gpupool image import FILE --name NAME,"
            " or a job's --image pulls it"
        )
    for s in listing["skipped"]:
        console.print(f"node {s['node']} not listed: {s['reason']}")


def images_table(held: list[dict[str, Any]]) -> Listing:
    table = Listing(IMAGE_COLUMNS)
    for i in held:
        table.add_row(
            i["node"],
            ", ".join(i["names"]) or "-",
            i["digest"].partition(":")[2][:12] or i["digest"],
            format_bytes(int(i["size"])),
            _when(i["last_used"]),
            "yes" if i["busy"] else "no",
        )
    return table


def _when(iso: str) -> str:
    """``2025-03-01 14:02Z``: minutes are enough to tell which image went unused longest."""
    return f"{iso[:10]} {iso[11:16]}Z" if len(iso) >= 16 else iso or "-"


FileArg = Annotated[
    Path,
    typer.Argument(
        help="an OCI archive (.tar, as skopeo or buildah write) or OCI layout directory, on a file system"
        " every node sees",
        show_default=False,
    ),
]
NameOpt = Annotated[
    str | None, typer.Option("--name", help="what jobs give as --image: NAME or NAME:TAG (default: the file's stem)")
]


def _default_name(path: Path) -> str:
    """The file's stem, where it is a name jobs can give (``mystack.tar``: ``mystack``)."""
    from gpupool.domain.images import BadImageRef, parse_ref

    try:
        ref = parse_ref(path.stem)
    except BadImageRef:
        ref = None
    if ref is None or ref.kind != "named" or ref.digest:
        raise typer.BadParameter(
            f"{path.stem!r} (the file's name) is no image name: give --name NAME, in lower-case letters,"
            " digits, '.', '_' and '-' (and :TAG)"
        )
    return path.stem


@image_app.command("import")
def import_image(
    file: FileArg,
    name: NameOpt = None,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Unpack an OCI archive on every node that is up (admin), named for jobs' --image."""
    path = os.path.abspath(os.path.expanduser(str(file)))  # the nodes read it: relative to nothing there
    chosen = name or _default_name(Path(path))
    from gpupool.client import GpupoolClient

    with GpupoolClient(url, resolve_token(url), timeout=IMPORT_TIMEOUT_S) as c:
        done = c.import_image(path, chosen)
    if output is Output.JSON:
        print_json(done)
        return
    for n in done["nodes"]:
        if n["result"] == "imported":
            image = n["image"]
            console.print(
                f"node {n['node']}: imported {done['name']} ({image['digest']}, {format_bytes(image['size'])})"
            )
        else:
            console.print(f"node {n['node']}: {n['result']}: {n['message']}")
    missing = [n["node"] for n in done["nodes"] if n["result"] != "imported"]
    if missing:
        console.print(
            f"import it again once {', '.join(missing)} can take it: gpupool image import {path} --name {chosen}"
        )
    console.print(f"run a job in it: gpupool submit --image {done['name']} -- COMMAND")
