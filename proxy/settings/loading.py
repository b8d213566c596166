"""Settings from a TOML file, then `RECAP_PROXY_...` environment overrides, then
command-line flags, validated at once by pydantic.

Loading is hand-written rather than pydantic-settings because the TOML path is chosen at
run time (`--config`) and every bad key, from any source, must come back in one message
that names the key and says what was expected.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import BaseModel, ValidationError

from proxy.errors import ConfigError
from proxy.settings.model import Settings
from proxy.settings.section import APP_NAME

ENV_PREFIX = "RECAP_PROXY_"
ENV_NESTING = "__"


def default_config_path() -> Path:
    """`config.toml` in the user's config dir (e.g. `~/.config/recap-proxy/`)."""
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)) / "config.toml"


def load_settings(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Load and validate settings: TOML file < environment < `overrides` (dotted keys).

    `path=None` uses the default config path when that file exists. Raises `ConfigError`
    naming every bad key.
    """
    data, path, env_keys = _gather(path, env, overrides)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path, env_keys)) from None


# More mistakes than this in one file: `load_settings_partly` gives up and gives the defaults.
MAX_LEFT_OUT = 64


def load_settings_partly(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    read: bool = True,
) -> Settings:
    """What `load_settings` would give were each bad key left out (at its default): for
    `doctor`, whose other checks should test the port, the upstream and the folders the user
    did set, not the defaults. Raises `ConfigError` only when the file cannot be read;
    `read=False` leaves it unread (the environment and `overrides` still count)."""
    data, _, _ = _gather(path, env, overrides, read=read)
    # One key at a time: leaving out a list item shifts the places named after it.
    for _ in range(MAX_LEFT_OUT):
        try:
            return Settings.model_validate(data)
        except ValidationError as exc:
            loc = exc.errors()[0]["loc"]
            # A missing required key has nothing to take out: the table it is missing from
            # goes instead.
            if not (_take_out(data, loc) or _take_out(data, loc[:-1])):
                break
    return Settings()


def _take_out(data: Any, loc: tuple[int | str, ...]) -> bool:
    """Remove the value at `loc` (keys and list indices) from `data`; False when absent."""
    if not loc:
        return False
    node = data
    for part in loc[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return False
    last = loc[-1]
    if isinstance(node, dict) and last in node:
        del node[last]
        return True
    if isinstance(node, list) and isinstance(last, int) and 0 <= last < len(node):
        del node[last]
        return True
    return False


def _gather(
    path: Path | None,
    env: Mapping[str, str] | None,
    overrides: Mapping[str, Any] | None,
    *,
    read: bool = True,
) -> tuple[dict[str, Any], Path | None, set[str]]:
    """The file's values (none when not `read`), then the environment's, then
    `overrides`, merged (not yet validated); the file read, if any; the dotted keys the
    environment set."""
    data: dict[str, Any] = {}
    explicit = path is not None
    path = path if explicit else default_config_path()
    if read and path is not None and (explicit or path.exists()):
        data = _read_toml(path)
    else:
        path = None
    env_values = _env_values(os.environ if env is None else env)
    for dotted, value in env_values.items():
        _set_dotted(data, dotted, value)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(data, dotted, value)
    return data, path, set(env_values)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None


def _env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """`RECAP_PROXY_UPSTREAM__BASE_URL=...` -> `{"upstream.base_url": ...}`.

    Values that look like JSON lists or objects are decoded, so that
    `RECAP_PROXY_INJECTION__CHATS_ENABLED='{"a": false}'` works. An empty variable counts
    as unset: compose and service managers write an unset `${VAR}` as "".
    """
    values: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or raw == "":
            continue
        dotted = name[len(ENV_PREFIX) :].lower().replace(ENV_NESTING, ".")
        value: Any = raw
        if raw[:1] in "[{":
            with contextlib.suppress(ValueError):
                value = json.loads(raw)
        values[dotted] = value
    return values


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def _describe(exc: ValidationError, path: Path | None, env_keys: set[str]) -> str:
    lines = ["invalid settings:"]
    for err in exc.errors():
        key = ".".join(str(part) for part in err["loc"])
        if err["type"] == "extra_forbidden":
            what = "unknown key" + _suggestion(err["loc"])
        else:
            shown = "<hidden>" if "api_key" in key else repr(err["input"])
            what = f"{err['msg'].removeprefix('Value error, ')} (got {shown})"
        source = ""
        if key in env_keys:
            env_name = ENV_PREFIX + key.upper().replace(".", ENV_NESTING)
            source = f" [from environment {env_name}]"
        elif path is not None:
            source = f" [in {path}]"
        lines.append(f"  {key}: {what}{source}")
    return "\n".join(lines)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The settings section an annotation holds: itself, or inside a list or an Optional."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _sections(model: type[BaseModel], path: str = "") -> dict[str, type[BaseModel]]:
    """Every section of `model` by its dotted name ("" for the top)."""
    found = {path: model}
    for name, field in model.model_fields.items():
        inner = _model_in(field.annotation)
        if inner is not None:
            found |= _sections(inner, f"{path}.{name}" if path else name)
    return found


def _section_at(parents: list[str]) -> type[BaseModel] | None:
    """The section a key sits in, by the names before it. A name that is no field is the
    key of a table of sections (`[memory.llm.operations.scene_recap]`): its value's."""
    model: type[BaseModel] = Settings
    for part in parents:
        field = model.model_fields.get(part)
        if field is None:
            continue
        inner = _model_in(field.annotation)
        if inner is None:
            return None
        model = inner
    return model


def _suggestion(loc: tuple[int | str, ...]) -> str:
    """What an unknown key was likely meant to be: a near spelling in its own section
    (`memory.mesage_recaps`), else the section that has that key (`upstream.port`)."""
    *parents, leaf = (str(part) for part in loc if not isinstance(part, int))
    model = _section_at(parents)
    if model is not None:
        near = difflib.get_close_matches(leaf, list(model.model_fields), n=1, cutoff=0.75)
        if near:
            return f" (did you mean {near[0]}?)"
    elsewhere = [
        f"{name}.{leaf}" if name else leaf
        for name, section in _sections(Settings).items()
        if section is not model and leaf in section.model_fields
    ]
    if elsewhere:
        return f" (did you mean {' or '.join(elsewhere)}?)"
    return ""
