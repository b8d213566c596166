"""What the wheel ships: the program (`proxy`, `adapters`) and its bundled templates, and
nothing of the checkout besides (no `tests`, no `bench`: a top-level `tests` package in
site-packages would shadow anyone else's)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from hatchling.builders.wheel import WheelBuilder

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_ships_the_program_and_its_templates_only(tmp_path: Path) -> None:
    [wheel] = WheelBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"proxy", "adapters", "recap_proxy-0.1.0.dist-info"}, tops
    bundled = {Path(n).name for n in names if n.startswith("proxy/templates/")}
    assert bundled == {p.name for p in (ROOT / "templates").iterdir() if p.is_file()}
    assert "proxy/web/static/app.js" in names  # the dashboard's files
    entry = zipfile.ZipFile(wheel).read("recap_proxy-0.1.0.dist-info/entry_points.txt")
    assert b"recap-proxy = proxy.cli.main:main" in entry
