"""What a module imports, read from its source with ``ast`` (the layer and floor tests)."""

from __future__ import annotations

import ast


def imported_names(source: str, package: list[str]) -> set[str]:
    """Imported names, fully qualified: ``from a.b import c`` gives ``a.b.c``; a relative import
    is resolved against ``package`` (the importing module's package, e.g. ["gpupool", "node"]).
    Every import counts, in a function body or under ``if TYPE_CHECKING`` too."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            names.update(f"{base}.{a.name}" for a in node.names)
    return names
