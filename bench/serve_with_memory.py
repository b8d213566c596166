"""The proxy app with a fixed memory, for benchmarks: `make_app` exactly as `serve` builds it,
but with a provider that always has a running recap, placed in chat at depth 4."""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import web

from proxy.chat.providers import StaticMemory
from proxy.core.models import Memory
from proxy.runtime.runtime import build_runtime
from proxy.settings import load_settings
from proxy.web import make_app
from proxy.web.listener import listen

RECAP = (
    "Arden, a traveller, woke in Seraphina's glade after a wolf attack near the old mill. "
    "Seraphina healed him and told him of the forest's guardians and the river spirits. "
    "He carries a silver compass from his father that points north-east. "
) * 8


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    settings = load_settings(
        None,
        env={},
        overrides={
            "upstream.base_url": args.upstream,
            "injection.position": "in_chat",
            "injection.depth": 4,
        },
    )
    app = make_app(
        build_runtime(settings, provider=StaticMemory(Memory(values={"running_recap": RECAP})))
    )
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await listen(runner, "127.0.0.1", args.port, settings.server.header_timeout)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
