"""The dashboard's first load and a 5,000-message chat opened in it. Prints figures; not
a timed test.

    python bench/dashboard.py

Runs the proxy in-process on a data folder with one chat of 5,000 messages (every 50th a
scene break, each scene recapped), then drives Debian's chromium (Playwright) to it:
- the bytes of the page's first load (index.html, app.js, chat.js, app.css);
- the time from navigation to the chat list, and from a click on the chat to its newest
  message on screen (the view opens at the end of the open scene), median of five;
- how many messages were rendered for that (the rest wait until scrolled to).
Targets: first load under 100 KiB; a 5,000-message chat open in under 1 s.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiohttp import web  # noqa: E402
from playwright.async_api import async_playwright  # noqa: E402

from proxy.runtime.runtime import build_runtime  # noqa: E402
from proxy.web import make_app  # noqa: E402
from proxy.web.keys import RUNTIME  # noqa: E402
from proxy.web.page import STATIC  # noqa: E402
from tests.conftest import make_settings  # noqa: E402
from tests.memory.story import CHAT_ID, Story  # noqa: E402
from tests.web.test_dashboard import ARGS, CHROMIUM  # noqa: E402

MESSAGES = 5000


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        Story(data, set(range(49, MESSAGES - 100, 50))).grow(MESSAGES)
        settings = make_settings(**{
            "sillytavern.data_dir": str(data), "store.path": str(Path(tmp) / "s.sqlite3"),
            "upstream.base_url": "http://127.0.0.1:9/v1",
        })  # fmt: skip
        app = make_app(build_runtime(settings))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        await app[RUNTIME].memory_parts().library.indexed.wait()
        actions = app[RUNTIME].memory_parts().actions
        for end in range(49, MESSAGES - 100, 50):
            await actions.set_break(CHAT_ID, end)
            await actions.edit_scene_recap(CHAT_ID, end, f"Scene ending at {end}.", None)
        size = sum(f.stat().st_size for f in STATIC.iterdir())
        print(f"first load: {size / 1024:.1f} KiB (index.html, app.js, chat.js, app.css)")
        lists, opens, rendered = [], [], 0
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            for _ in range(5):
                page = await browser.new_page()
                started = time.perf_counter()
                await page.goto(f"http://127.0.0.1:{port}/recap/")
                await page.locator("#chats tbody tr a").first.wait_for()
                lists.append(time.perf_counter() - started)
                started = time.perf_counter()
                await page.locator("#chats tbody tr a").first.click()
                await page.locator(f'.msg[data-index="{MESSAGES - 1}"]').wait_for()
                opens.append(time.perf_counter() - started)
                rendered = await page.locator(".msg").count()
                await page.close()
            await browser.close()
        await runner.cleanup()
        print(f"chat list shown: {statistics.median(lists) * 1000:.0f} ms (median of 5)")
        print(f"{MESSAGES}-message chat open, newest message on screen: "
              f"{statistics.median(opens) * 1000:.0f} ms (median of 5)")  # fmt: skip
        print(f"messages rendered to open it: {rendered} of {MESSAGES}")


if __name__ == "__main__":
    asyncio.run(main())
