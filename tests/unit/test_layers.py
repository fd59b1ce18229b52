"""The pure core imports nothing with side effects (DESIGN §2)."""

import ast
from pathlib import Path

import gpupool

SRC = Path(gpupool.__file__).parent
FORBIDDEN = {
    "sqlalchemy",
    "fastapi",
    "httpx",
    "pynvml",
    "ray",
    "prometheus_client",
    "uvicorn",
    "alembic",
    "typer",
    "rich",
    "starlette",
    "pydantic",
    "subprocess",
    "socket",
    "os",
}
CORE_ALLOWED_GPUPOOL = {"gpupool.domain", "gpupool.scheduler"}


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_domain_and_scheduler_import_only_the_standard_library_and_each_other() -> None:
    offenders = []
    for layer in ("domain", "scheduler"):
        for path in (SRC / layer).rglob("*.py"):
            for name in imports(path):
                top = name.split(".")[0]
                if top in FORBIDDEN:
                    offenders.append(f"{path.relative_to(SRC)} imports {name}")
                if top == "gpupool" and not any(name.startswith(p) for p in CORE_ALLOWED_GPUPOOL):
                    offenders.append(f"{path.relative_to(SRC)} imports {name}")
    assert offenders == []


def test_only_the_nvml_probe_imports_pynvml() -> None:
    users = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if "pynvml" in imports(p)]
    assert users == ["node/gpu/nvml.py"]


def test_modules_stay_small() -> None:
    big = [
        (p.relative_to(SRC).as_posix(), n) for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400
    ]
    assert big == []
