"""MkDocs hook: the reference pages are generated from the code at build time, so they cannot drift.

A page holds a marker where generated Markdown goes:

- ``<!-- gpupool:cli -->``: every command and option, walked from the CLI's own click tree
  (``typer.main.get_command`` of ``gpupool.cli.main.app``), help texts and defaults included;
- ``<!-- gpupool:openapi -->``: every route of the REST API and every schema, from the OpenAPI
  document of an app built as the head builds it (``api/app.create_app``; building starts nothing:
  no database is opened, no thread started), with who may call each route (``api/permissions``);
- ``<!-- gpupool:metrics -->``: every series of the head's ``/metrics``, from the families that
  ``api/prometheus.py`` and ``api/prometheus_services.py`` define;
- ``<!-- gpupool:include PATH -->``: a Markdown file of the repository outside ``docs/`` (e.g.
  ``deploy/README.md``), included as it is, so it has one home.

An unknown marker fails the build. The figures under ``benchmarks/results/`` are added to the site
as ``assets/benchmarks/NAME``, so the performance pages show them without a copy in ``docs/``.
Nothing generated is committed: ``mkdocs build --strict`` (``scripts/test``) makes it each time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- gpupool:(\S+)(?: (\S+))? -->")
FIGURES = ROOT / "benchmarks" / "results"


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for figure in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"assets/benchmarks/{figure.name}", abs_src_path=str(figure)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        kind, arg = match.group(1), match.group(2)
        if kind == "include" and arg:
            return _demoted((ROOT / arg).read_text())
        if kind in GENERATORS and not arg:
            return GENERATORS[kind]()
        raise ValueError(f"{page.file.src_uri}: unknown marker {match.group(0)}")

    return MARKER.sub(replace, markdown)


def _demoted(markdown: str) -> str:
    """An included file's headings one level down, so they sit under the page's own title
    (lines inside code fences, such as a YAML comment, are left alone)."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        out.append("#" + line if line.startswith("#") and not fenced else line)
    return "\n".join(out)


# --- the CLI -----------------------------------------------------------------------------------


def cli_markdown() -> str:
    import typer

    from gpupool.cli.main import app

    root = typer.main.get_command(app)
    out: list[str] = []
    _command(root.context_class(root, info_name="gpupool"), root, out, top=True)
    return "\n".join(out)


def _command(ctx: Any, cmd: Any, out: list[str], top: bool = False) -> None:
    """One command's section, then its subcommands'. Typer may vendor click, so the command
    objects are read by what they offer (``get_help_record``, ``list_commands``), never by class."""
    path = ctx.command_path
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    if not top:
        out += [f"## `{path}`", ""]
    out += [_text(cmd.help or ""), "", "```", f"{path} {usage}", "```", ""]
    rows = [_param_row(ctx, p) for p in cmd.params if not getattr(p, "hidden", False)]
    if rows:
        out += ["| option | meaning |", "| --- | --- |", *rows, ""]
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                _command(sub.context_class(sub, info_name=name, parent=ctx), sub, out)


def _param_row(ctx: Any, p: Any) -> str:
    """What ``--help`` prints for the parameter: its names and type, its help with the default
    and range; an argument by its name."""
    if p.param_type_name == "argument":
        suffix = "..." if p.nargs == -1 else ""
        name = f"`{p.name.upper()}{suffix}` (argument{'' if p.required else ', optional'})"
        helptext = getattr(p, "help", None) or ""
    else:
        record = p.get_help_record(ctx)
        if record is None:
            return ""
        name = "`" + "`, `".join(part.strip() for part in record[0].split(", ")) + "`"
        name = name.replace(" / ", "` / `")
        helptext = record[1]
    return f"| {name} | {_cell(_text(helptext))} |"


# --- the REST API ------------------------------------------------------------------------------


def openapi_markdown() -> str:
    from gpupool.api.app import create_app
    from gpupool.api.permissions import TABLE
    from gpupool.usecases.context import HeadContext

    # Only the routes and schemas are read: nothing here is called, so no database, clock or
    # executor is needed, and create_app starts no thread (the app's lifespan never runs).
    app = create_app(HeadContext(db=None, clock=None, executor=None, wake_controller=lambda: None))  # type: ignore[arg-type]
    doc = app.openapi()
    out = [f"OpenAPI {doc['openapi']}, gpupool {doc['info']['version']}.", ""]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((method.upper(), path, op))
    for tag, ops in by_tag.items():
        out += [f"## {tag}", ""]
        for method, path, op in ops:
            out += _operation(method, path, op, TABLE.get((method, path)))
    out += ["## Schemas", ""]
    for name, schema in doc["components"]["schemas"].items():
        out += _schema(name, schema)
    return "\n".join(out)


def _operation(method: str, path: str, op: dict[str, Any], rule: Any) -> list[str]:
    out = [f"### `{method} {path}`", "", f"**{op.get('summary', '')}.**", ""]
    if op.get("description"):
        out += [_text(op["description"]), ""]
    out += [f"Who may call it: {rule.describe() if rule is not None else 'not in the permission table'}.", ""]
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | meaning |", "| --- | --- | --- | --- | --- |"]
        for p in params:
            schema = p.get("schema", {})
            meaning = p.get("description") or schema.get("description") or ""
            required = "yes" if p.get("required") else "no"
            row = [f"`{p['name']}`", p["in"], _cell(_schema_type(schema)), required, _cell(_text(meaning))]
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    body = op.get("requestBody")
    if body:
        kinds = ", ".join(f"{_cell(_schema_type(c.get('schema', {})))} ({m})" for m, c in body["content"].items())
        out += [f"Body: {kinds}.", ""]
    out += ["| status | meaning | body |", "| --- | --- | --- |"]
    for status, answer in op.get("responses", {}).items():
        content = answer.get("content", {})
        shape = ", ".join(_cell(_schema_type(c.get("schema", {}))) for c in content.values()) or "—"
        out.append(f"| {status} | {_cell(_text(answer.get('description', '')))} | {shape} |")
    return [*out, ""]


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name}", "", f'<a id="schema-{name.lower()}"></a>', ""]
    if schema.get("description"):
        out += [_text(schema["description"]), ""]
    if "enum" in schema:
        return [*out, "One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
    props = schema.get("properties", {})
    if not props:
        return [*out, f"`{json.dumps(schema)[:200]}`", ""]
    required = set(schema.get("required", []))
    out += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
    for field, sub in props.items():
        meaning = sub.get("description", "")
        if "default" in sub and sub["default"] is not None:
            meaning += f" (default `{json.dumps(sub['default'])}`)"
        row = [f"`{field}`", _cell(_schema_type(sub)), "yes" if field in required else "no", _cell(_text(meaning))]
        out.append("| " + " | ".join(row) + " |")
    return [*out, ""]


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_schema_type(s) for s in schema[key])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_schema_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
        return f"map of {_schema_type(schema['additionalProperties'])}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return str(kind)


# --- the metrics -------------------------------------------------------------------------------


def metrics_markdown() -> str:
    from gpupool.api import prometheus
    from gpupool.api.prometheus_services import ServiceCollector
    from gpupool.usecases.load import LoadBoard
    from gpupool.usecases.metrics import ClusterFigures

    # The families as a scrape of an empty cluster yields them: names, types, help and labels.
    empty = ClusterFigures(jobs={}, projects=[], nodes=[])
    store = [
        *prometheus.job_families(empty),
        *prometheus.project_families(empty),
        *prometheus.node_families(empty),
        *prometheus.idle_and_alert_families(empty),
    ]
    dcgm = list(prometheus.dcgm_families(empty))
    scheduler = prometheus.SchedulerMetrics()
    observed = [*scheduler.cycle_seconds.describe(), *scheduler.pending_seconds.describe()]
    services = list(ServiceCollector(lambda: [], LoadBoard()).collect())
    out = [
        "### Read from the store at every scrape",
        "",
        *_families(store),
        "### Observed by the controller (in the head's memory; they start from zero with the head)",
        "",
        *_families(observed),
        "### Services (replica counts from the store, load from the gateway's reports)",
        "",
        *_families(services),
        "### Per GPU, under dcgm-exporter's names",
        "",
        "Labels: " + ", ".join(f"`{label}`" for label in [*prometheus.DCGM_LABELS, "simulated"]) + ".",
        "",
        *_families(dcgm, labels=False),
    ]
    return "\n".join(out)


def _families(families: list[Any], labels: bool = True) -> list[str]:
    head = "| series | type | labels | meaning |" if labels else "| series | type | meaning |"
    out = [head, "| --- | --- | --- | --- |" if labels else "| --- | --- | --- |"]
    for family in families:
        name = family.name + ("_total" if family.type == "counter" else "")
        if family.type == "histogram":
            name += "` (`_bucket`, `_sum`, `_count`)"
            name = f"`{name}"
        else:
            name = f"`{name}`"
        cells = [name, family.type]
        if labels:
            cells.append(", ".join(f"`{label}`" for label in getattr(family, "_labelnames", ())) or "—")
        cells.append(_cell(_text(family.documentation)))
        out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]


# --- text --------------------------------------------------------------------------------------


def _text(text: str) -> str:
    """A docstring or help text as Markdown prose: reST's double backticks become code, click's
    \\b paragraph marks go, and what Markdown would read as HTML is escaped."""
    parts = text.replace("\b", "").replace("``", "`").split("`")
    text = "`".join(part if n % 2 else part.replace("<", "&lt;") for n, part in enumerate(parts))
    return "\n".join(line.strip() for line in text.strip().splitlines())


def _cell(text: str) -> str:
    """A table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|").replace("\\\\|", "\\|")


GENERATORS = {"cli": cli_markdown, "openapi": openapi_markdown, "metrics": metrics_markdown}
