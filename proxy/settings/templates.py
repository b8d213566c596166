"""Where template files are found: the bundled `templates/` folder (inside the wheel, or
beside `proxy/` in a checkout) and the user's own folder of overrides."""

from __future__ import annotations

from pathlib import Path

import platformdirs

from proxy.errors import TemplateError
from proxy.settings.section import APP_NAME

# `proxy/` itself: the wheel puts `templates/` inside it, a checkout beside it.
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
BUNDLED_DIRS = (_PACKAGE_DIR / "templates", _PACKAGE_DIR.parent / "templates")


def bundled_template(name: str) -> Path:
    """A file of the bundled `templates/` folder."""
    for folder in BUNDLED_DIRS:
        if (folder / name).is_file():
            return folder / name
    raise TemplateError(f"bundled template {name!r} not found in {BUNDLED_DIRS[0]}")


def user_templates_dir(configured: Path | None) -> Path:
    """Where the user's overrides live: the configured folder, else the config folder's
    `templates/` (`~/.config/recap-proxy/templates` on Linux)."""
    if configured is not None:
        return configured
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)) / "templates"
