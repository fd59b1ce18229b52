"""The layers and the direction of imports (docs/architecture.md, DESIGN §2), read from the source.

Every import in a module counts, inside a function or under ``if TYPE_CHECKING`` too: an upward
import or a circle cannot hide in a function body. The rules are tables; ``violations`` applies
them to a mapping of path -> source, so the self-check can feed it modules that break each rule.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import gpupool
from tests.support.source_imports import imported_names

SRC = Path(gpupool.__file__).parent


@dataclass(frozen=True)
class Layer:
    name: str
    units: frozenset[str]  # top-level packages and modules of gpupool ("head" is head.py)
    holds: str


# Top to bottom: a module may import its own layer and the layers below it, never one above.
LAYERS = (
    Layer("entry", frozenset({"cli"}), "commands; the only code that starts a head or joins a node"),
    # head.py builds the API app, so it sits above the faces; only the CLI starts it.
    Layer("assembly", frozenset({"head", "head_ray", "backends"}), "wires app, controller, executor from Settings"),
    Layer("faces", frozenset({"api", "client", "sim", "gateway", "dashboard"}), "parse, render, call the use cases"),
    Layer("shell", frozenset({"controller", "usecases"}), "load -> decide -> apply"),
    # clock.py reads the time and settings.py the environment: side effects, injected from above.
    Layer(
        "side effects",
        frozenset({"store", "executors", "node", "clock", "settings", "knobs", "paths"}),
        "database, processes, NVML",
    ),
    # Floors inside it (hooks, session, actions, plugins, registry): tests/architecture/test_scheduler_frame.py.
    Layer("core", frozenset({"scheduler"}), "schedule(snapshot, config): pure, no I/O, no clock"),
    # __init__ is gpupool/__init__.py: the version, nothing else.
    Layer("types", frozenset({"domain", "__init__"}), "frozen types, transition tables, the error tree"),
)
# Faces do not import each other, except these (importer, imported).
FACE_EDGES = frozenset({("api", "dashboard")})  # the API serves the dashboard's files

# Imports only some files may make: name (and what is under it) -> path prefixes allowed.
RESTRICTED = {
    "sqlalchemy": ("store/",),  # the store owns the database
    "alembic": ("store/",),  # its migrations live in store/migrations
    "gpupool.store.orm": ("store/",),
    "gpupool.store.convert": ("store/",),
    "ray": ("executors/ray.py",),  # ray_processes.py drives the `ray` program, it does not import it
    "gpupool.executors.ray": ("head_ray.py",),  # Ray is loaded only when the Ray backend is chosen
    "pynvml": ("node/gpu/nvml.py",),
}
# Packages that may not import these parts of gpupool, though their layer allows it: the controller
# speaks to nodes only through the executor, in the domain's words (``domain/launch.py``).
FORBIDDEN = {"controller/": ("gpupool.node",)}
# Packages that may import only these parts of gpupool: the gateway is a process of its own that
# talks to the head over HTTP; it reads no store, runs no service, and carries only the domain's types.
ONLY_GPUPOOL = {"gateway/": ("gpupool.gateway", "gpupool.domain")}
# ``python -m gpupool.node.supervisor`` runs on every launch: the standard library only, plus the
# run-directory protocol it shares with the runtime. Importing that runs the package __init__ files.
STDLIB_ONLY = {
    "node/supervisor.py": frozenset(
        {"gpupool.node.rundir", "gpupool.node.cgroups", "gpupool.node.accounts", "gpupool.node.jobns"}
        | {"gpupool.node.container", "gpupool.node.image_start", "gpupool.node.images"}
    ),
    "node/rundir.py": frozenset(
        {"gpupool.node.accounts", "gpupool.node.cgroups", "gpupool.node.jobns", "gpupool.node.container"}
        | {"gpupool.node.image_job"}
    ),
    "node/image_job.py": frozenset({"gpupool.domain.launch"}),
    "node/image_start.py": frozenset(
        {"gpupool.node.container", "gpupool.node.images", "gpupool.node.accounts", "gpupool.node.jobns"}
        | {"gpupool.domain.launch", "gpupool.node.image_job"}
    ),
    "node/container.py": frozenset({"gpupool.node.bpf", "gpupool.node.jobns"}),  # C library calls through bpf.libc
    "node/cgroups.py": frozenset({"gpupool.node.devices", "gpupool.node.cgfiles", "gpupool.domain.launch"}),
    "node/cgfiles.py": frozenset(),
    "node/devices.py": frozenset({"gpupool.node.bpf"}),
    "node/bpf.py": frozenset(),
    "node/jobns.py": frozenset({"gpupool.node.bpf"}),  # its C library calls go through bpf.libc
    "node/accounts.py": frozenset(),
    # the image cache: the supervisor gets a job's image before it starts the worker
    "node/images.py": frozenset(
        {"gpupool.node.oci", "gpupool.node.unpack", "gpupool.node.accounts", "gpupool.node.pull"}
    ),
    "node/pull.py": frozenset({"gpupool.node.oci"}),
    "node/oci.py": frozenset(
        {"gpupool.node.accounts", "gpupool.domain.images"}
    ),  # the head's grammar of refs  # its parse_ref is the head's too
    "node/unpack.py": frozenset({"gpupool.node.oci"}),
    # forks supervisors: what it imports, every supervisor has
    "node/zygote.py": frozenset({"gpupool.node.rundir", "gpupool.node.supervisor"}),
    "node/__init__.py": frozenset(),
    # the executor contract: its usage reading is what the supervisor's cgroups.py builds
    "domain/launch.py": frozenset(),
    "domain/__init__.py": frozenset(),
    "__init__.py": frozenset(),
}
# The core (domain, scheduler) imports only the standard library, and not the parts that do I/O.
CORE = ("domain/", "scheduler/")
CORE_FORBIDDEN_STDLIB = frozenset(
    {"asyncio", "logging", "multiprocessing", "os", "pathlib", "random", "shutil", "signal", "socket"}
    | {"subprocess", "threading", "time"}
)


@dataclass(frozen=True)
class Violation:
    path: str
    name: str
    rule: str
    message: str


def violations(sources: Mapping[str, str]) -> list[Violation]:
    """Every broken rule in ``sources`` (path relative to ``gpupool/`` -> its text)."""
    modules = {_dotted(p): p for p in sources}
    rank = {unit: i for i, layer in enumerate(LAYERS) for unit in layer.units}
    graph: dict[str, set[str]] = {}
    found: list[Violation] = []
    for path, source in sorted(sources.items()):
        if _unit(path) not in rank:
            found.append(Violation(path, "", "unplaced", f"{path}: {_unit(path)} is in no layer of LAYERS"))
        names = _imports(source, path)
        graph[path] = {t for n in names if (t := _target(n, modules)) is not None and t != path}
        for name in sorted(names):
            found.extend(_check(path, name, modules, rank))
    found.extend(Violation(c[0], "", "cycle", "import circle: " + " -> ".join(c)) for c in _cycles(graph))
    return found


def read_sources(root: Path = SRC) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.py")}


def test_every_import_follows_the_layers_and_rules() -> None:
    found = [v.message for v in violations(read_sources())]
    assert found == []


def test_the_checker_catches_each_rule() -> None:
    real = read_sources()
    fake = {
        **real,
        "scheduler/bad.py": "import os\nfrom gpupool.store import jobs\n",
        "usecases/bad.py": "def f():\n    from sqlalchemy import select\n",
        "controller/bad.py": "from gpupool.store.orm import JobRow\nfrom gpupool.node.runtime import NodeRuntime\n",
        "store/bad.py": "import ray\nimport pynvml\n",
        "api/bad.py": "from gpupool.sim import engine\nfrom gpupool.head import Head\n",
        "node/rundir.py": real["node/rundir.py"] + "\nimport httpx\nfrom gpupool.domain import jobs\n",
        "telemetry/bad.py": "",
        "gateway/bad.py": "from gpupool.store import jobs\nfrom gpupool.usecases import access\n",
        "sim/a.py": "from gpupool.sim import b\n",
        "sim/b.py": "if TYPE_CHECKING:\n    from gpupool.sim.a import X\n",
    }
    found = {(v.path, v.name, v.rule) for v in violations(fake)}
    assert {
        ("scheduler/bad.py", "os", "core"),
        ("scheduler/bad.py", "gpupool.store.jobs", "layer"),
        ("usecases/bad.py", "sqlalchemy.select", "restricted"),
        ("controller/bad.py", "gpupool.store.orm.JobRow", "restricted"),
        ("controller/bad.py", "gpupool.node.runtime.NodeRuntime", "forbidden"),
        ("store/bad.py", "ray", "restricted"),
        ("store/bad.py", "pynvml", "restricted"),
        ("api/bad.py", "gpupool.sim.engine", "layer"),
        ("api/bad.py", "gpupool.head.Head", "layer"),
        ("node/rundir.py", "httpx", "stdlib-only"),
        ("node/rundir.py", "gpupool.domain.jobs", "stdlib-only"),
        ("telemetry/bad.py", "", "unplaced"),
        ("gateway/bad.py", "gpupool.store.jobs", "only"),
        ("gateway/bad.py", "gpupool.usecases.access", "only"),
        ("sim/a.py", "", "cycle"),
    } <= found
    assert not [v for v in violations(real) if v.path.endswith("bad.py")]


def test_modules_stay_small() -> None:
    big = [
        (p.relative_to(SRC).as_posix(), n) for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400
    ]
    assert big == []


def _check(path: str, name: str, modules: Mapping[str, str], rank: Mapping[str, int]) -> list[Violation]:
    out: list[Violation] = []
    top = name.split(".")[0]
    stdlib = top in sys.stdlib_module_names
    for restricted, allowed in RESTRICTED.items():
        if _under(name, restricted) and not path.startswith(allowed):
            out.append(Violation(path, name, "restricted", f"{path} imports {name}: only {', '.join(allowed)} may"))
    for prefix, forbidden in FORBIDDEN.items():
        if path.startswith(prefix) and any(_under(name, f) for f in forbidden):
            out.append(Violation(path, name, "forbidden", f"{path} imports {name}: {prefix} may not"))
    for prefix, allowed_here in ONLY_GPUPOOL.items():
        if path.startswith(prefix) and top == "gpupool" and not any(_under(name, m) for m in allowed_here):
            out.append(
                Violation(path, name, "only", f"{path} imports {name}: it may import only {', '.join(allowed_here)}")
            )
    if path in STDLIB_ONLY and not stdlib and not any(_under(name, m) for m in STDLIB_ONLY[path]):
        out.append(Violation(path, name, "stdlib-only", f"{path} imports {name}: it runs on the standard library"))
    if path.startswith(CORE) and (top in CORE_FORBIDDEN_STDLIB or not (stdlib or top == "gpupool")):
        out.append(Violation(path, name, "core", f"{path} imports {name}: the core does no I/O"))
    target = _target(name, modules)
    if target is None:
        return out
    mine, theirs = _unit(path), _unit(target)
    if mine == theirs or mine not in rank or theirs not in rank:
        return out
    if rank[theirs] < rank[mine] or (
        rank[theirs] == rank[mine] and LAYERS[rank[mine]].name == "faces" and (mine, theirs) not in FACE_EDGES
    ):
        layer, other = LAYERS[rank[mine]].name, LAYERS[rank[theirs]].name
        out.append(Violation(path, name, "layer", f"{path} ({layer}) imports {name} ({other})"))
    return out


def _imports(source: str, path: str) -> set[str]:
    return imported_names(source, ["gpupool", *Path(path).parent.parts])


def _target(name: str, modules: Mapping[str, str]) -> str | None:
    """The path of the gpupool module ``name`` loads (the longest prefix that is a module)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if (path := modules.get(".".join(parts[:end]))) is not None:
            return path
    return None


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                out.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _dotted(path: str) -> str:
    parts = ["gpupool", *Path(path).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(path: str) -> str:
    return path.split("/")[0].removesuffix(".py")


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")
