"""The rules that keep the house standing, checked over the source itself:

- the layers (`LAYERS`, the module map in `proxy/__init__.py`): no module imports from a
  layer above its own, function-level, type-only and package `__init__` imports included;
- `proxy/core` and `proxy/identify` are pure: nothing they import, directly or through
  other proxy modules, does I/O (no aiohttp, sqlite3, asyncio, watchfiles, sockets, file
  access, clocks);
- no import cycle between modules of `proxy/` and `adapters/`;
- at most six modules loose at `proxy/`'s root;
- no function of `proxy/` or `adapters/` above cyclomatic complexity 25 (radon's count);
- at least 90 % of the modules have a test module at the mirrored path under `tests/`,
  and each one that has none is listed in `UNTESTED` with the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("proxy", "adapters")

# The layers, bottom to top: a module belongs to the longest prefix listed, and imports only
# from its own layer and those below. `proxy` is the package's root (`__version__`).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("proxy", "proxy.errors", "proxy.tasks", "proxy.waits"),
    ("proxy.core",),
    ("proxy.identify",),
    ("adapters",),
    ("proxy.sillytavern",),
    ("proxy.settings",),
    ("proxy.store",),
    ("proxy.library",),
    ("proxy.upstream",),
    ("proxy.observe",),
    ("proxy.chat",),
    ("proxy.memory",),
    ("proxy.runtime",),
    ("proxy.web",),
    ("proxy.doctor",),
    ("proxy.cli", "proxy.__main__"),
)
PURE = ("proxy.core", "proxy.identify")
ROOT_MODULES_AT_MOST = 6
COMPLEXITY_AT_MOST = 25

# Modules that do I/O, or whose import means I/O; none may be reached from `proxy.core`.
IMPURE = {
    "aiohttp", "asyncio", "sqlite3", "watchfiles", "socket", "os", "pathlib", "time",
    "shutil", "subprocess", "threading", "concurrent", "platformdirs", "tempfile", "glob",
    "urllib.request", "http",
}  # fmt: skip

# Modules without a test module of their own, and why.
UNTESTED = {
    "proxy/__main__.py": "calls `proxy.cli.main.main` (tests/cli/test_main.py)",
    "proxy/settings/__main__.py": "prints `example_toml()` (tests/settings/test_example.py)",
    "proxy/web/keys.py": "typed app keys only; every test through make_app reads them",
    "proxy/memory/engine.py": "planning is driven end to end in tests/memory/test_loop.py",
    "proxy/memory/ops/registry.py": "the handlers by operation, run in tests/memory/test_loop.py",
    "proxy/memory/edits/actions.py": "every action is called through tests/web/test_memory_api.py",
    "proxy/memory/running.py": "coverage and pruning run in tests/memory/test_loop.py",
    "proxy/store/records.py": "row mapping, read back in tests/test_store.py",
    "proxy/store/memory.py": "the memory tables are read and written in tests/memory/",
    "proxy/store/jobs.py": "the job table behind tests/memory/calls/test_jobs.py",
    "proxy/core/jsontypes.py": "type aliases and two checks, used by the memory tests",
    "proxy/settings/templates.py": "bundled and user templates: tests/memory/calls/test_prompts.py",
    "adapters/base.py": "the parsed request type, used by tests/adapters/test_openai_chat.py",
}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(path: Path, name: str, known: dict[str, Path]) -> Iterator[str]:
    """Every module `path` imports (inside functions and `TYPE_CHECKING` too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                full = f"{base}.{alias.name}"
                # `from pkg import module` imports the module; `from mod import name` the module
                yield full if full in known else base


def graph() -> dict[str, set[str]]:
    """Module -> the modules importing it runs. Importing `a.b.c` from outside package
    `a.b` runs `a.b`'s `__init__` first, so that is an edge too (a cycle through a
    package's `__init__` breaks at import time, whichever module comes first)."""
    known = modules()
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        targets: set[str] = set()
        for target in imports(path, name, known):
            targets.add(target)
            parts = target.split(".")
            for i in range(1, len(parts)):
                package = ".".join(parts[:i])
                if package in known and not name.startswith(package + "."):
                    targets.add(package)
        edges[name] = targets - {name}
    return edges


def layer(name: str) -> int:
    """The index in `LAYERS` of the layer module `name` belongs to."""
    best, found = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    assert found >= 0, f"{name} is in no layer of LAYERS"
    return found


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    up = [
        f"{name} ({LAYERS[layer(name)][0]}) imports {target} ({LAYERS[layer(target)][0]})"
        for name, targets in graph().items()
        for target in sorted(targets & graph_names)
        if layer(target) > layer(name)
    ]
    assert not up, "imports up the layers:\n" + "\n".join(up)


def test_at_most_six_modules_sit_loose_at_the_root() -> None:
    loose = sorted(p.name for p in (ROOT / "proxy").glob("*.py") if p.stem != "__init__")
    assert len(loose) <= ROOT_MODULES_AT_MOST, loose


def test_no_function_is_more_complex_than_twenty_five() -> None:
    over = [
        f"{path.relative_to(ROOT)}:{block.lineno} {block.fullname} ({block.complexity})"
        for path in modules().values()
        for block in cc_visit(path.read_text(encoding="utf-8"))
        if block.complexity > COMPLEXITY_AT_MOST
    ]
    assert not over, "split these: " + ", ".join(over)


def test_the_pure_layers_import_nothing_that_does_io() -> None:
    edges = graph()
    for start in [name for name in edges if name.startswith(PURE)]:
        seen: dict[str, str] = {start: start}
        todo = [start]
        while todo:
            current = todo.pop()
            for target in edges.get(current, ()):
                top = target.split(".")[0]
                assert target not in IMPURE and top not in IMPURE, (
                    f"{start} reaches {target} through {seen[current]} -> {current}"
                )
                if target in edges and target not in seen:
                    seen[target] = current
                    todo.append(target)


def test_no_import_cycles() -> None:
    edges = {name: {t for t in targets if t in graph_names} for name, targets in graph().items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for target in sorted(edges[name]):
            if state.get(target) == 1:
                cycle = [*stack[stack.index(target) :], target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[name] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name)


graph_names = set(modules())


def _declarations_only(path: Path) -> bool:
    """A module of a docstring, imports and plain assignments: nothing to test."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return all(
        isinstance(node, ast.Import | ast.ImportFrom | ast.Assign)
        or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        for node in body
    )


def test_nine_modules_in_ten_have_a_mirrored_test_module() -> None:
    missing = []
    mirrored: set[str] = set()
    counted = 0
    for path in modules().values():
        rel = path.relative_to(ROOT)
        if path.name == "__init__.py":
            if _declarations_only(path) or len(rel.parts) == 2:
                continue  # a docstring and re-exports; the package roots (map, registry)
            mirror = Path("tests", *rel.parent.parts[1:-1], f"test_{rel.parent.name}.py")
        else:
            mirror = Path("tests", *rel.parts[1:-1], f"test_{path.stem}.py")
            if rel.parts[0] == "adapters":
                mirror = Path("tests", "adapters", f"test_{path.stem}.py")
        counted += 1
        if (ROOT / mirror).is_file():
            mirrored.add(rel.as_posix())
        elif rel.as_posix() not in UNTESTED:
            missing.append(f"{rel} (expected {mirror})")
    assert not missing, "modules without a test module: " + ", ".join(missing)
    untested = [rel for rel in UNTESTED if (ROOT / rel).name != "__main__.py"]
    assert len(untested) <= counted // 10, f"{len(untested)} of {counted} untested: {untested}"
    stale = [rel for rel in UNTESTED if not (ROOT / rel).is_file()]
    assert not stale, f"UNTESTED names modules that are gone: {stale}"
    tested = [rel for rel in UNTESTED if rel in mirrored]
    assert not tested, f"UNTESTED names modules that have a test module: {tested}"
