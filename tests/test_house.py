"""The rules that keep the house standing, checked over the source itself:

- `proxy/core` is pure: nothing it imports, directly or through other proxy modules, does
  I/O (no aiohttp, sqlite3, asyncio, watchfiles, sockets, file access, clocks);
- no import cycle between modules of `proxy/` and `adapters/`, type-only imports included;
- every module has a test module at the mirrored path under `tests/`, or is listed in
  `UNTESTED` with the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("proxy", "adapters")

# Modules that do I/O, or whose import means I/O; none may be reached from `proxy.core`.
IMPURE = {
    "aiohttp", "asyncio", "sqlite3", "watchfiles", "socket", "os", "pathlib", "time",
    "shutil", "subprocess", "threading", "concurrent", "platformdirs", "tempfile", "glob",
    "urllib.request", "http",
}  # fmt: skip

# Modules without a test module of their own, and why.
UNTESTED = {
    "proxy/__main__.py": "two lines that call `proxy.cli.main` (tested in tests/test_cli.py)",
    "proxy/settings/__main__.py": "prints `example_toml()` (tests/settings/test_example.py)",
    "proxy/web/keys.py": "typed app keys only; every test through make_app reads them",
    "proxy/web/routes.py": "the routes tests/web/test_relay.py and test_cassettes.py drive",
    "proxy/memory/engine.py": "planning is driven end to end in tests/memory/test_loop.py",
    "proxy/memory/handlers.py": "every operation runs in tests/memory/test_loop.py, test_faults",
    "proxy/memory/views.py": "read through the chat path in tests/memory/test_loop.py",
    "proxy/memory/actions.py": "every action is called through tests/web/test_memory_api.py",
    "proxy/memory/settings.py": "validated with the whole model in tests/test_settings.py",
    "proxy/memory/operations.py": "names and keys, used by every memory test",
    "proxy/memory/running.py": "coverage and pruning run in tests/memory/test_loop.py",
    "proxy/section.py": "two building blocks, validated in tests/test_settings.py",
    "proxy/store/database.py": "the synchronous API is tested in tests/test_store.py",
    "proxy/store/records.py": "row mapping, read back in tests/test_store.py",
    "proxy/store/schema.py": "migrations run in tests/test_store.py",
    "proxy/store/memory.py": "the memory tables are read and written in tests/memory/",
    "proxy/store/jobs.py": "the job table behind tests/memory/test_jobs.py",
    "proxy/sillytavern/layout.py": "the folder layout is read in tests/test_library.py",
    "proxy/core/jsontypes.py": "type aliases and two checks, used by the memory tests",
    "proxy/template_files.py": "bundled and user templates, in tests/memory/test_prompts.py",
    "proxy/cli_memory.py": "the memory commands, in tests/test_cli_memory.py",
    "proxy/watcher.py": "tested as tests/test_watcher.py",
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


def test_core_imports_nothing_that_does_io() -> None:
    edges = graph()
    for start in [name for name in edges if name.startswith("proxy.core")]:
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


def test_every_module_has_a_mirrored_test_module() -> None:
    missing = []
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
        if not (ROOT / mirror).is_file() and rel.as_posix() not in UNTESTED:
            missing.append(f"{rel} (expected {mirror})")
    assert not missing, "modules without a test module: " + ", ".join(missing)
    stale = [rel for rel in UNTESTED if not (ROOT / rel).is_file()]
    assert not stale, f"UNTESTED names modules that are gone: {stale}"
