"""The one settings model: every section and field recap-proxy can be told, each
described, with its default (`proxy.settings.loading` reads it from a file, the
environment and the command line)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import (
    Field,
    SecretStr,
    field_validator,
)

from proxy.core.guard import is_loopback
from proxy.settings.injection import InjectionSettings
from proxy.settings.memory import MemorySettings
from proxy.settings.section import APP_NAME, Section, UserPath


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
    header_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds a client has to send a whole request head once it connects; "
        "one that stalls part-way is disconnected.",
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

    def unguarded(self, host: str | None = None) -> str | None:
        """Why listening on `host` (default: `self.host`) is not safe with these settings:
        an address other machines can reach, and no access key. None when it is safe."""
        host = self.host if host is None else host
        if is_loopback(host.strip("[]")) or self.access_key is not None:
            return None
        return (
            f"server.host is {host}, which other machines can reach, and server.access_key "
            "is not set: anyone there could use your API key and your chats. Set one (e.g. "
            "RECAP_PROXY_SERVER__ACCESS_KEY=$(python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(24))')) and give it to SillyTavern as its API key, "
            "or listen on 127.0.0.1."
        )

    @field_validator("access_key")
    @classmethod
    def _real_key(cls, value: SecretStr | None) -> SecretStr | None:
        # An empty key would read as "no key" further on and open an exposed proxy to
        # anyone; leave the key out to mean none.
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("is empty: give a real key, or leave the setting out for none")
        return value


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
    proxy: str | None = Field(
        None,
        description="An HTTP proxy this route's requests go through, instead of "
        "`upstream.proxy` (or the environment's `HTTPS_PROXY`/`HTTP_PROXY`).",
        examples=["http://127.0.0.1:3128"],
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

    @field_validator("base_url", "proxy")
    @classmethod
    def _base(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value)


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
        100,
        ge=1,
        description="Upper bound on simultaneous connections to each upstream host. A "
        "request that finds them all busy waits for one within `connect_timeout`, then "
        "gets a 504 that says so.",
    )
    proxy: str | None = Field(
        None,
        description="An HTTP proxy every upstream request goes through (`http://host:port`, "
        "`http://user:password@host:port`). Unset: the environment's `HTTPS_PROXY` / "
        "`HTTP_PROXY` / `NO_PROXY` decide, as for curl (an upstream on loopback never goes "
        "through the environment's proxy). A route may set its own.",
        examples=["http://127.0.0.1:3128"],
    )
    ca_file: UserPath | None = Field(
        None,
        description="A PEM file of certificate authorities to trust besides the system's: "
        "an HTTPS upstream on your network with a self-signed or private CA's certificate.",
        examples=["~/my-ca.pem"],
    )
    verify: bool = Field(
        True,
        description="Check HTTPS upstreams' certificates. `false` accepts any certificate "
        "(anyone on the way could read your key and chats); a warning says so at start. "
        "Prefer `ca_file`.",
    )

    @field_validator("base_url", "proxy")
    @classmethod
    def _base(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value)

    @field_validator("ca_file")
    @classmethod
    def _ca(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no such file: {value}")
        return value

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


class RecordSettings(Section):
    max_body_mb: float = Field(
        8.0,
        gt=0,
        description="A body (a request's, or an answer's chunks together) larger than this "
        "many megabytes goes into a cassette as its size and SHA-256 only: recording a "
        "huge exchange neither stalls the proxy nor fills the disk.",
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
    record: RecordSettings = Field(
        default_factory=RecordSettings,
        description="Cassettes written with `serve --record DIR` (`server.record_dir`).",
    )
