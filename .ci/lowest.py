"""Print a pip constraints file pinning each runtime dependency of pyproject.toml at its
lower bound (`name>=X` -> `name==X`), for `.ci/run` to test the lowest releases the
project admits. Read from pyproject.toml itself, so the pins cannot drift from the bounds;
a dependency without a lower bound is an error, not a silent skip."""

import re
import sys
import tomllib
from pathlib import Path

BOUND = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*([0-9][0-9A-Za-z.]*)")

project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
for dependency in project["project"]["dependencies"]:
    found = BOUND.fullmatch(dependency.strip())
    if found is None:
        sys.exit(f"pyproject.toml: {dependency!r} has no plain '>=' lower bound to test")
    print(f"{found.group(1)}=={found.group(2)}")
