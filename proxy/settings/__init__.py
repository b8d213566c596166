"""The one settings model: a TOML file, then `RECAP_PROXY_...` environment overrides,
then command-line flags, validated at once by pydantic.

Loading is hand-written rather than pydantic-settings because the TOML path is chosen at
run time (`--config`) and every bad key, from any source, must come back in one message
that names the key and says what was expected.
"""

from __future__ import annotations

import contextlib
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)

from proxy.core.models import Position, Role
from proxy.errors import ConfigError
from proxy.memory.settings import MemorySettings
from proxy.section import APP_NAME, Section, UserPath
from proxy.settings.injection import InjectionSettings

ENV_PREFIX = "RECAP_PROXY_"
ENV_NESTING = "__"


class ServerSettings(Section):
    host: str = Field(
        "127.0.0.1",
        description="Address to listen on. Keep the loopback default unless other machines "
        "must reach the proxy: it forwards your API key to the upstream.",
    )
    port: int = Field(
        8765,
        ge=1,
        le=65535,
        description="TCP port. 8765 is the port ST-Auto-Recap already recognises as its proxy.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Logging verbosity. Request bodies and API keys are never logged."
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="`text`: one readable line per record; `json`: one JSON object per line "
        "(`time`, `level`, `logger`, `message`), for a log collector. Same as "
        "`serve --log-format`.",
    )
    access_log: bool = Field(
        False,
        description="One line per request at info level: method, path (without its query), "
        "status, milliseconds, and for a chat request its chat and inserted tokens. Never a "
        "body, a header or a key.",
    )
    record_dir: UserPath | None = Field(
        None,
        description="When set, every proxied exchange is written there as a cassette file "
        "(API keys redacted). Same as `serve --record DIR`.",
        examples=["~/recap-proxy-recordings"],
    )
    access_key: SecretStr | None = Field(
        None,
        description="When set, every request must carry it: on a path that goes upstream "
        "as `Authorization: Bearer <access_key>` (ST's Custom API key, Text Completion key or "
        "OpenAI proxy password) or `x-api-key` (Claude's proxy password), the real key then "
        "coming from `upstream.api_key` or the route's; or as `X-Recap-Key`; on `/recap/...` "
        "as `X-Recap-Key` (the CLI sends it). Required to listen on anything but loopback.",
        examples=["a-long-random-string"],
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Web origins, besides the proxy's own and SillyTavern's on loopback "
        "(`http://127.0.0.1:8000`, `http://localhost:8000`), whose pages may call the proxy: "
        "e.g. ST on another port or machine. Any other page is refused (403).",
        examples=[["http://192.168.1.20:8000"]],
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names the proxy answers to besides loopback and the listen "
        "address (a name you reach it by on your network). Other names are refused (421): "
        "this stops DNS rebinding.",
        examples=[["recap.lan"]],
    )


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    return value.rstrip("/")


class UpstreamRoute(Section):
    prefix: str = Field(
        description="A path prefix on the proxy, e.g. `/claude`: `<prefix>/<path>` goes to "
        "this route's `base_url` as other paths go to `upstream.base_url`.",
        examples=["/claude"],
    )
    base_url: str = Field(
        description="The API this prefix leads to, `/v1` included where it has one.",
        examples=["https://api.anthropic.com/v1"],
    )
    api_key: SecretStr | None = Field(
        None,
        description="When set, replaces the key the client sends on this route (in the "
        "header the client put it in: `x-api-key` or `Authorization: Bearer`).",
    )

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        prefix = "/" + value.strip().strip("/")
        first = prefix.split("/")[1]
        if (
            prefix == "/"
            or first in ("v1", "recap")
            or any(p in (".", "..") for p in prefix.split("/"))
        ):
            raise ValueError("a route prefix is a path like `/claude`, not `/`, `/v1` or `/recap`")
        return prefix

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str) -> str:
        return _http_url(value)


class UpstreamSettings(Section):
    base_url: str = Field(
        "http://127.0.0.1:5001/v1",
        description="The real API. `/v1/<rest>` on the proxy maps to `<base_url>/<rest>`, so "
        "include the API's own `/v1` here; any other path maps to the same path on "
        "`base_url` without its `/v1` (`/completion`, `/api/generate`, `/api/extra/...`).",
    )
    routes: list[UpstreamRoute] = Field(
        default_factory=list,
        description="More APIs at once, each under its own path prefix on the proxy: "
        '`[[upstream.routes]]` `prefix = "/claude"`, `base_url = "https://api.anthropic.com/v1"` '
        "makes `/claude/v1/messages` go to `https://api.anthropic.com/v1/messages`.",
    )
    api_key: SecretStr | None = Field(
        None,
        description="When set, replaces the client's `Authorization` with `Bearer <api_key>`. "
        "Leave unset to forward the key ST sends.",
        examples=["sk-..."],
    )
    connect_timeout: float = Field(
        10.0, gt=0, description="Seconds to wait for a connection to the upstream."
    )
    read_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds to wait for the next byte from the upstream (slow models can "
        "think for minutes before their first token).",
    )
    max_connections: int = Field(
        100, ge=1, description="Upper bound on simultaneous connections to the upstream."
    )

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str) -> str:
        return _http_url(value)

    @field_validator("routes")
    @classmethod
    def _distinct(cls, routes: list[UpstreamRoute]) -> list[UpstreamRoute]:
        prefixes = [r.prefix for r in routes]
        doubled = sorted({p for p in prefixes if prefixes.count(p) > 1})
        if doubled:
            raise ValueError(f"route prefix {doubled[0]} is given twice")
        return routes


class SillyTavernSettings(Section):
    data_dir: UserPath | None = Field(
        None,
        description="ST's `data/` folder (the one holding `default-user/`). Unset: looked for "
        "in the usual install places; without it the proxy still proxies, without memory. "
        "Read only: nothing is ever written there.",
        examples=["~/SillyTavern/data"],
    )
    watch: bool = Field(True, description="Follow changes to ST's chats while serving.")
    debounce_ms: int = Field(
        100, ge=10, le=10000, description="Milliseconds to gather file changes before re-reading."
    )
    force_polling: bool = Field(
        False,
        description="Poll for changes instead of using OS notifications (network shares, "
        "some Docker volumes); each chat request then also checks its chat's file.",
    )


class StoreSettings(Section):
    path: UserPath | None = Field(
        None,
        description="The proxy's own SQLite file. Unset: `recap-proxy.sqlite3` in the user's "
        "data dir (e.g. ~/.local/share/recap-proxy/ on Linux).",
        examples=["~/.local/share/recap-proxy/recap-proxy.sqlite3"],
    )

    def resolved_path(self) -> Path:
        if self.path is not None:
            return self.path
        return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "recap-proxy.sqlite3"


class QueueSettings(Section):
    concurrency: int = Field(
        1, ge=1, le=16, description="LLM calls at a time per upstream for the proxy's own work."
    )
    delay_seconds: float = Field(
        0.0, ge=0, description="Pause after each of the proxy's own LLM calls, per upstream."
    )
    max_attempts: int = Field(
        5, ge=1, le=100, description="Tries before a job is marked failed (401/403: one)."
    )
    backoff_seconds: float = Field(
        10.0, gt=0, description="Wait before the first retry; doubles with each retry."
    )
    backoff_cap_seconds: float = Field(300.0, gt=0, description="Longest wait between retries.")
    failed_retry_minutes: float = Field(
        30.0,
        gt=0,
        description="A job that failed `max_attempts` times stays failed (and visible) this "
        "long; then planning queues it again by itself, so one bad call never stops a "
        "chat's memory for good.",
    )
    keep_done_days: float = Field(
        7.0,
        gt=0,
        description="Finished jobs (done, or dropped because their message changed) stay "
        "in the queue's list this long, then are forgotten (checked at start-up and daily); "
        "failed ones stay until retried or cleared. The calls and tokens they spent are "
        "counted apart and stay.",
    )


class Settings(Section):
    """Everything recap-proxy can be told, with its default."""

    server: ServerSettings = Field(
        default_factory=ServerSettings, description="The HTTP server ST talks to."
    )
    upstream: UpstreamSettings = Field(
        default_factory=UpstreamSettings, description="The real LLM API behind the proxy."
    )
    injection: InjectionSettings = Field(
        default_factory=InjectionSettings,
        description="How and where the memory is inserted into chat requests.",
    )
    sillytavern: SillyTavernSettings = Field(
        default_factory=SillyTavernSettings, description="Where SillyTavern keeps its chats."
    )
    store: StoreSettings = Field(default_factory=StoreSettings, description="The proxy's own data.")
    queue: QueueSettings = Field(
        default_factory=QueueSettings,
        description="The queue of the proxy's own LLM work (recaps, scene detection).",
    )
    memory: MemorySettings = Field(
        default_factory=MemorySettings, description="How the memory is written."
    )


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
            what = "unknown key"
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


def example_toml() -> str:
    """`config.example.toml`: every setting with its description and default.

    The committed file is generated from here (`python -m proxy.settings > config.example.toml`)
    and a test keeps the two equal, so the example cannot fall behind the model.
    """
    lines = [
        "# recap-proxy settings. Every key is optional; the values shown are the defaults.",
        "# Default location: the user's config dir, e.g. ~/.config/recap-proxy/config.toml on",
        "# Linux (`recap-proxy serve --help` shows yours), or pass --config FILE.",
        f"# Environment overrides: {ENV_PREFIX}<SECTION>{ENV_NESTING}<KEY>, "
        f"e.g. {ENV_PREFIX}UPSTREAM{ENV_NESTING}BASE_URL.",
    ]
    defaults = Settings()
    for section_name, section_field in Settings.model_fields.items():
        _section_lines(
            lines, section_name, section_field.description, getattr(defaults, section_name)
        )
    return "\n".join(lines) + "\n"


def _section_lines(lines: list[str], path: str, description: str | None, section: Any) -> None:
    """One `[section]` with its keys; sub-sections (`[memory.llm]`) follow it."""
    lines += ["", f"# {description}", f"[{path}]"]
    nested = []
    for name, field in type(section).model_fields.items():
        value = getattr(section, name)
        if isinstance(value, BaseModel):
            nested.append((f"{path}.{name}", field.description, value))
            continue
        lines.append("")
        lines += [f"# {line}" for line in _wrap(field.description or "")]
        rendered = _toml_value(value)
        if rendered is None:  # unset by default: show an example, commented out
            example = (field.examples or [""])[0]
            lines.append(f"# {name} = {_toml_value(example)}")
        else:
            lines.append(f"{name} = {rendered}")
    for sub_path, sub_description, sub_section in nested:
        _section_lines(lines, sub_path, sub_description, sub_section)


def _wrap(text: str, width: int = 88) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width) or [""]


def _toml_value(value: object) -> str | None:
    """A TOML literal, or None for "unset" (written as a commented-out key)."""
    if value is None:
        return None
    if isinstance(value, Position | Role):
        return json.dumps(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) or '""' for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return None  # an empty table is shown as a commented example
        pairs = (f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise TypeError(f"no TOML form for {value!r}")
