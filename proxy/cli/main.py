"""`recap-proxy`: arguments -> Settings -> run. Thin on purpose."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from adapters import formats
from proxy.chat.injection import Injector, load_injection_templates, policy_from
from proxy.chat.providers import StaticMemory
from proxy.cli.chats import read_bytes, run_chats, run_identify
from proxy.cli.eval import add_eval_command, run_eval
from proxy.cli.import_settings import add_import_command, run_import_settings
from proxy.cli.memory import add_memory_commands, run_memory_command
from proxy.cli.service import (
    ST_DATA_HELP,
    add_serve_options,
    add_service_commands,
    run_doctor,
    run_service,
    serve_overrides,
)
from proxy.core.headers import safe_url
from proxy.core.models import Memory
from proxy.errors import AdapterError, ConfigError, RecapProxyError
from proxy.observe.logs import setup_logging
from proxy.runtime.reload import Reloader
from proxy.settings import Settings, default_config_path, load_settings

log = logging.getLogger("proxy")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recap-proxy",
        description="Long-term memory for SillyTavern, as a reverse proxy in front of your "
        "LLM API (OpenAI-compatible, Claude, or a Text Completion server).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def config_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config",
            type=Path,
            help=f"settings file (TOML); default {default_config_path()} when it exists",
        )

    serve = sub.add_parser("serve", help="run the proxy")
    config_arg(serve)
    add_serve_options(serve)
    serve.add_argument(
        "--record", type=Path, metavar="DIR", help="write every exchange as a cassette into DIR"
    )
    serve.add_argument(
        "--log-format", choices=("text", "json"), help="log lines as text or JSON (default text)"
    )
    serve.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), help="default info"
    )

    chats = sub.add_parser("chats", help="index SillyTavern's chats and list them")
    config_arg(chats)
    chats.add_argument("--st-data", type=Path, metavar="DIR", help=ST_DATA_HELP)
    chats.add_argument("--json", action="store_true", help="print JSON instead of a table")

    ident = sub.add_parser(
        "identify",
        help="tell which chat a request belongs to (chat completion, Claude, text completion)",
    )
    config_arg(ident)
    ident.add_argument("--st-data", type=Path, metavar="DIR", help=ST_DATA_HELP)
    ident.add_argument(
        "request", nargs="?", type=Path, metavar="REQUEST_JSON", help="request body; default stdin"
    )
    ident.add_argument("--chat-id", help="as the X-ST-Chat-Id header would name it")

    inject = sub.add_parser(
        "inject",
        help="print the body the proxy would send upstream for a request (chat completion, "
        "Claude, text completion)",
    )
    config_arg(inject)
    inject.add_argument("--position", help="before_prompt|in_prompt|in_chat|none or 2|0|1|-1")
    inject.add_argument("--depth", type=int, help="for in_chat: chat messages after the memory")
    inject.add_argument("--role", help="system|user|assistant or 0|1|2")
    memory = inject.add_mutually_exclusive_group(required=True)
    memory.add_argument("--memory", metavar="TEXT", help="the running recap to insert")
    memory.add_argument("--memory-file", type=Path, metavar="F", help="read the recap from F")
    inject.add_argument(
        "--no-template",
        action="store_true",
        help="insert the memory text as given instead of through the injection template",
    )
    inject.add_argument("--pretty", action="store_true", help="indent the printed JSON")
    inject.add_argument(
        "request", nargs="?", type=Path, metavar="REQUEST_JSON", help="request body; default stdin"
    )
    add_service_commands(sub, config_arg)
    add_memory_commands(sub, config_arg)
    add_import_command(sub, config_arg)
    add_eval_command(sub, config_arg)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parse_args`, except that an option the command does not take is reported with that
    command's usage (`recap-proxy memory: error: ... --st-data`), not the top level's,
    which lists only the command names and leaves the user to guess which options apply."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        chosen = parser
        while True:
            subs = [a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)]
            name = getattr(args, subs[0].dest, None) if subs else None
            if name is None:
                break
            chosen = subs[0].choices[name]
        chosen.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(build_parser(), argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "chats":
            return _run(run_chats(args))
        if args.command == "identify":
            return _run(run_identify(args))
        if args.command == "inject":
            return _inject(args)
        if args.command == "import-settings":
            return run_import_settings(args)
        if args.command == "doctor":
            return _run(run_doctor(args))
        if args.command == "service":
            return run_service(args)
        if args.command == "eval":
            return _run(run_eval(args))
        return _run(run_memory_command(args))
    except ConfigError as exc:
        print(f"recap-proxy: {exc}", file=sys.stderr)
        return 2
    except RecapProxyError as exc:
        print(f"recap-proxy: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `recap-proxy queue | head`: the reader left; say nothing more.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stays open until exit
        return 0


def _run(command: Coroutine[Any, Any, int]) -> int:
    """`asyncio.run`, where SIGTERM (a service manager, `timeout`) stops the command as
    Ctrl-C does, its cleanup run (`backfill` ends its progress line and says the jobs go
    on), with exit status 143."""

    async def guarded() -> int:
        task = asyncio.current_task()
        assert task is not None
        terminated = False

        def terminate() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        # None on Windows, nor off the main thread (a test's): SIGTERM acts as it would.
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminate)
        try:
            return await command
        except asyncio.CancelledError:
            if terminated:
                return 128 + signal.SIGTERM
            raise

    return asyncio.run(guarded())


# Objects allocated, less those freed, before the collector looks at the young ones
# (Python's default: 700). A chat request allocates a few hundred that die with it; at
# 700, a loaded server collected every few requests, walking what the requests under way
# still held: 13 us of CPU per request at 32 concurrent clients (5 %). At this size, most
# die before a collection comes. Cycles wait a little longer to be freed: a few MB at most.
GC_YOUNG = 10_000


def tune_gc() -> None:
    """The collector's thresholds for a long-running server (see `GC_YOUNG`)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, middle, old)


def _serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {
        **serve_overrides(args),
        "server.record_dir": str(args.record) if args.record else None,
        "server.log_level": args.log_level,
        "server.log_format": args.log_format,
    }
    settings = load_settings(args.config, overrides=overrides)
    setup_logging(settings.server.log_level, settings.server.log_format)
    tune_gc()
    try:
        # A reload reads the same file with the same command-line overrides.
        asyncio.run(
            serve(settings, reload_from=partial(load_settings, args.config, overrides=overrides))
        )
    except OSError as exc:
        print(
            f"recap-proxy: cannot listen on {settings.server.host}:{settings.server.port}: "
            f"{exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    return 0


async def serve(
    settings: Settings,
    *,
    ready: asyncio.Event | None = None,
    reload_from: Callable[[], Settings] | None = None,
) -> None:
    """Run the server until SIGINT/SIGTERM; SIGHUP reloads the config and the templates."""
    from proxy.runtime.runtime import build_runtime
    from proxy.web import make_app
    from proxy.web.listener import listen

    _refuse_if_exposed(settings)
    runtime = build_runtime(settings, reload_from=reload_from, owns_logging=True)
    app = make_app(runtime)
    # handler_cancellation: when ST disconnects (Stop), the handler is cancelled and the
    # upstream request with it.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    host, port = settings.server.host, settings.server.port
    # The signals are ours before the port opens: a SIGHUP sent as soon as it answers
    # (a service manager, a test) would otherwise end the process, SIGHUP's default.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if hasattr(signal, "SIGHUP"):  # not on Windows: POST /recap/api/reload there
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signal.SIGHUP, _reload_now, runtime.reloader)
    listening: asyncio.Server | None = None
    try:
        listening = await listen(runner, host, port, settings.server.header_timeout)
        log.info(
            "recap-proxy listening on http://%s:%d/v1 -> %s%s",
            host,
            port,
            safe_url(settings.upstream.base_url),
            f" (recording into {settings.server.record_dir})" if settings.server.record_dir else "",
        )
        log.info("the memory dashboard: http://%s:%d/recap/", host, port)
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("recap-proxy stopping")
    finally:
        if listening is not None:
            listening.close()
        await runner.cleanup()


def _reload_now(reloader: Reloader) -> None:
    try:
        reloader.reload()
    except RecapProxyError as exc:
        log.error("reload failed, nothing changed: %s", exc)


def _refuse_if_exposed(settings: Settings) -> None:
    """Another machine may reach a non-loopback address: not without the access key."""
    problem = settings.server.unguarded()
    if problem is not None:
        raise ConfigError(problem)


def _inject(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {
        "injection.position": args.position,
        "injection.depth": args.depth,
        "injection.role": args.role,
    }
    if args.no_template:
        overrides["injection.template"] = "{{running_recap}}"
    settings = load_settings(args.config, overrides=overrides)
    setup_logging("warning")
    text = args.memory
    if args.memory_file is not None:
        text = _read_text(args.memory_file, "memory file")
    raw = read_bytes(args.request) if args.request else sys.stdin.buffer.read()
    adapter = formats().for_body(raw)
    try:
        adapter.parse(raw)
    except AdapterError as exc:
        print(f"recap-proxy: {args.request or 'stdin'}: {exc}", file=sys.stderr)
        return 2
    # Same path as the server: a provider that always has this memory, then the injector.
    injection = settings.injection.model_copy(update={"enabled": True})
    injector = Injector(
        policy_from(injection),
        load_injection_templates(injection),
        StaticMemory(Memory(values={"running_recap": text}, chat_enabled=True)),
    )
    outcome = asyncio.run(injector.prepare(adapter, raw, {}, where="inject"))
    body = outcome.body
    if args.pretty:
        body = json.dumps(json.loads(body), indent=2, ensure_ascii=False).encode() + b"\n"
    sys.stdout.buffer.write(body)
    sys.stdout.buffer.flush()
    if not outcome.insertions:
        print("recap-proxy: nothing inserted", file=sys.stderr)
    placements = {"stable": injection.placement(), "changing": injection.changing.placement()}
    for insertion in outcome.insertions:
        placement = placements[insertion.part]
        print(
            f"recap-proxy: inserted the {insertion.part} part, a {insertion.role.value} "
            f"message, at index {insertion.index} ({placement.position.value}"
            + (f", depth {placement.depth}" if placement.position.value == "in_chat" else "")
            + f"), {insertion.tokens} tokens",
            file=sys.stderr,
        )
    return 0


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecapProxyError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RecapProxyError(f"{what} {path} is not UTF-8 text") from None
