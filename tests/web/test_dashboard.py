"""The dashboard in a real browser: Playwright driving Debian's chromium against
`recap-proxy serve` in its own process, with a data folder and the fake model.

The browser is Debian's (`/usr/bin/chromium`, which `.ci/run` installs when it is
missing); nothing is downloaded. Without it these tests skip, except where
`RECAP_BROWSER_TESTS=1` says they must run (CI): then they fail instead.
Screenshots go to `RECAP_SCREENSHOTS` when set (the README's come from there).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest

from proxy.core.guard import KEY_HEADER
from tests.conftest import FakeLLM
from tests.memory.story import CHAT_ID, Story
from tests.st_data import GROUP_ID, final_state
from tests.test_serve_e2e import free_port, launch, stop, wait_for_port

CHROMIUM = Path(os.environ.get("RECAP_CHROMIUM", "/usr/bin/chromium"))
REQUIRED = os.environ.get("RECAP_BROWSER_TESTS") == "1"
pytestmark = pytest.mark.slow
if not CHROMIUM.exists() and not REQUIRED:
    pytest.skip(f"no browser at {CHROMIUM} (Debian's chromium package)", allow_module_level=True)

from playwright.async_api import Browser, Page, Route, async_playwright, expect  # noqa: E402

# How the machine's closed network wants chromium started (no calls home).
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]  # fmt: skip
KEY = "dash-key"
expect.set_options(timeout=15_000)  # a loaded 2-core CI machine: patience, not sleeps


@dataclass
class Served:
    url: str
    fake: FakeLLM
    data: Path
    story: Story


def write_config(tmp_path: Path, fake: FakeLLM, data: Path, port: int, **extra: str) -> Path:
    lines = [
        "[server]", f"port = {port}", f'access_key = "{KEY}"',
        "[upstream]", f'base_url = "{fake.base_url}"',
        "[sillytavern]", f'data_dir = "{data}"', "debounce_ms = 10",
        "[store]", f'path = "{tmp_path / "store.sqlite3"}"',
        "[memory]", "minimum_scene_length = 4", "scene_break_offset = 2",
        "scene_break_every = 1", "message_recaps = false",
        "[memory.llm]", 'model = "fake-model"',
        "[queue]", "backoff_seconds = 1",  # a failed call's retry comes within the test
    ]  # fmt: skip
    lines += [f"{k} = {v}" for k, v in extra.items()]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def served(tmp_path: Path, fake_llm: FakeLLM) -> Iterator[Served]:
    data = tmp_path / "st" / "data"
    story = Story(data, {8})
    story.grow(16)
    other = Story(data, {6, 14, 22}, char="Bea")
    other.grow(30)
    port = free_port()
    config = write_config(tmp_path, fake_llm, data, port)
    proc = launch(tmp_path, "proxy", "serve", "--config", str(config))
    try:
        wait_for_port(port, proc)
        yield Served(f"http://127.0.0.1:{port}", fake_llm, data, story)
    finally:
        log = stop(proc, 15)
        assert "Traceback" not in log, log


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        found = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield found
        await found.close()


async def open_page(browser: Browser, url: str) -> Page:
    page = await browser.new_page(viewport={"width": 1200, "height": 900})
    page.set_default_timeout(15000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors  # type: ignore[attr-defined]
    await page.goto(url)
    return page


async def open_dashboard(browser: Browser, served: Served) -> Page:
    """The dashboard, given the access key it asks for once per browser session."""
    page = await open_page(browser, served.url + "/recap/")
    await page.fill("#key-input", KEY)
    await page.click("#key-form button")
    # The key is kept once the dialog closes: a page opened after that sends it.
    await page.locator("#key-dialog").wait_for(state="hidden")
    return page


async def screenshot(page: Page, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("RECAP_SCREENSHOTS") or tmp_path).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(folder / f"{name}.png"))


async def chat_request(served: Served) -> None:
    """The story's next request, as ST sends it through the proxy."""
    async with aiohttp.ClientSession() as session:
        url = f"{served.url}/v1/chat/completions"
        headers = {"Authorization": f"Bearer {KEY}"}
        async with session.post(url, json=served.story.request(), headers=headers) as response:
            assert response.status == 200
            await response.read()


async def test_a_person_follows_and_fixes_the_memory(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    page = await open_dashboard(browser, served)  # the access key is asked once
    # Which of ST's folders the chats are from, beside their count.
    await expect(page.locator("#chat-count")).to_have_text(f"2 chats in {served.data}")
    await page.fill("#filter", "ava")
    chats = page.locator("#chats tbody tr:visible")
    await expect(chats).to_have_count(1)
    await expect(chats.locator('option[value="default"]')).to_have_text("default (on)")
    await expect(page.locator("#live")).to_have_text("live")
    await chats.locator("a").click()
    await expect(page.locator("#chat-title")).to_have_text(CHAT_ID.rsplit("/", 1)[1])
    await expect(page.locator("#overview")).to_contain_text("memory default (on)")

    # The model works while the page watches: the scene shows first, then its recap.
    served.fake.state.faults["scene_recap"] = ["hold"]
    await chat_request(served)
    scene = page.locator('details.scene[data-scene="8"]')
    await expect(scene.locator("summary")).to_contain_text("no recap yet")
    served.fake.state.release.set()
    await expect(scene.locator("summary")).not_to_contain_text("no recap yet")
    await expect(page.locator("#running-version")).to_have_text("running recap v1")
    # The open scene (#9-#15) was checked up to #13; two newer messages, one more to come.
    await expect(page.locator('details.scene[data-scene="open"] summary')).to_contain_text(
        "next scene-break check in 1 message"
    )

    # Edit the scene's recap: a new version, and the running recap folded again.
    await scene.locator("summary").click()
    await scene.get_by_role("button", name="Edit recap").click()
    await page.fill("#edit-text", "Ava and Tom reach the old mill. The lantern is lit.")
    await page.click("#edit-save")
    await expect(scene.locator(".recap")).to_have_text(
        "Ava and Tom reach the old mill. The lantern is lit."
    )
    await expect(scene.locator("summary")).to_contain_text("2 versions")
    await screenshot(page, "chat-view", tmp_path)

    # The running recap was folded again from the edited scene (the version built on the
    # old text went); edited by hand, it has two versions to compare and pick from.
    await page.get_by_role("tab", name="Running recap").click()
    await expect(page.locator("#running-current")).to_contain_text("The lantern is lit.")
    await page.get_by_role("button", name="Edit", exact=True).click()
    edited = await page.input_value("#edit-text")
    await page.fill("#edit-text", edited.replace("The lantern is lit.", "Tom keeps the lantern."))
    await page.click("#edit-save")
    await expect(page.locator("#running-current")).to_contain_text("Tom keeps the lantern.")
    await expect(page.locator("#running-version")).to_have_text("running recap v2")
    await expect(page.locator("#running-diff .add")).to_contain_text("Tom keeps the lantern.")
    await expect(page.locator("#running-diff .del")).to_contain_text("The lantern is lit.")
    await screenshot(page, "running-diff", tmp_path)
    await page.locator('tr[data-version="1"]').get_by_role("button", name="Pick").click()
    await expect(page.locator('tr[data-version="1"] .badge')).to_have_text("current")
    await expect(page.locator("#running-version")).to_have_text("running recap v1")

    # A break set by hand, then removed.
    await page.get_by_role("tab", name="Scenes & messages").click()
    message = page.locator('.msg[data-index="12"]')
    await message.hover()
    await message.get_by_role("button", name="End a scene here").click()
    await expect(page.locator('details.scene[data-scene="12"]')).to_have_count(1)
    await page.locator('details.scene[data-scene="12"] summary').click()
    await page.locator('.break[data-break="12"]').get_by_role("button", name="Remove").click()
    await expect(page.locator('details.scene[data-scene="12"]')).to_have_count(0)

    # The scene's recap versions: the first one picked again, then edited into a third.
    if await scene.get_attribute("open") is None:
        await scene.locator("summary").click()
    await scene.get_by_role("button", name="Versions").click()
    versions = scene.locator(".versions-list > div")
    await expect(versions).to_have_count(2)
    first = await versions.first.locator(".recap").inner_text()
    await versions.first.get_by_role("button", name="Pick").click()
    await expect(scene.locator(".recap").first).to_have_text(first)
    # The running recap edited by hand above comes after this scene: it stays (not folded
    # over again), and the page says so.
    kept = page.locator(".toast", has_text="the running recap keeps your edit")
    await expect(kept).to_be_visible()
    await scene.get_by_role("button", name="Versions").click()
    await versions.first.get_by_role("button", name="Edit into a new version").click()
    assert await page.input_value("#edit-text") == first
    await page.fill("#edit-text", first + " Fixed by hand.")
    await page.click("#edit-save")
    await expect(scene.locator("summary")).to_contain_text("3 versions")

    # What the model gets: the inserted memory and the request's budget.
    await page.get_by_role("tab", name="What the model gets").click()
    await expect(page.locator("#budget-legend")).to_contain_text("memory")
    memory_part = page.locator("#budget .memory")
    assert float((await memory_part.get_attribute("style") or "0").split(":")[1].rstrip("%")) > 0
    await expect(page.locator("#injected-stable")).to_contain_text("Ava")
    await expect(page.get_by_text("the stable part (the running recap)")).to_be_visible()

    # The queue: paused and resumed.
    await page.click("a[href='#/queue']")
    await page.click("#queue-pause")
    await expect(page.locator("#queue-state")).to_have_text("paused")
    await page.click("#queue-resume")
    await expect(page.locator("#queue-state")).to_have_text("running")
    # Its own calls, per chat (named as in the queue, a link to it), prompt and answer
    # tokens apart: an API bills them at different prices.
    spent = page.locator(f"#usage tr[data-chat='{CHAT_ID}']")
    await expect(spent.locator("td").nth(1)).to_have_text(
        re.compile(r"^\d+ calls?: [\d,]+ tokens in, [\d,]+ out$")
    )
    await expect(spent.locator("a")).to_have_text(CHAT_ID.split("/")[-1])

    # Backfill another chat and follow its progress to the end.
    await page.click("a[href='#/']")
    await page.fill("#filter", "bea")
    await page.locator("#chats tbody tr:visible a").click()
    await page.click("#backfill")
    await expect(page.locator("#backfill-label")).to_have_text("100 % done", timeout=30000)
    await expect(page.locator("#backfill-progress > div")).to_have_attribute(
        "style", "width: 100%;"
    )
    # Both chats' calls now, and their sum: the fake's own count of every call.
    await page.click("a[href='#/queue']")
    await expect(page.locator("#usage tbody tr")).to_have_count(2)
    total = page.locator("#usage tfoot th").nth(2)
    for _ in range(100):  # a call that ends meanwhile reloads the table, and adds to both
        calls, prompt, answer = (
            sum(c[i] for c in served.fake.state.usage.values()) for i in range(3)
        )
        if await total.inner_text() == f"{calls} calls: {prompt:,} tokens in, {answer:,} out":
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"the page's total {await total.inner_text()!r} is not the calls'")
    assert page.errors == []  # type: ignore[attr-defined]


async def test_backfill_says_what_holds_it_up(served: Served, browser: Browser) -> None:
    # Three failures in a row (retried after 1, 2, 4 s): the states below hold long enough.
    served.fake.state.faults["detect_scene_break"] = ["status=503"] * 3
    page = await open_dashboard(browser, served)
    await page.fill("#filter", "bea")
    await page.locator("#chats tbody tr:visible a").click()
    await page.click("#backfill")
    label = page.locator("#backfill-label")
    # The API's error, while the job waits for its retry (the label used to count jobs).
    await expect(label).to_contain_text("to go; retrying: the API answered 503")
    # The chat's overview says it too, the whole error in its title.
    await expect(page.locator("#waiting")).to_have_text("retrying: the API answered 503")
    error = 'the API answered 503: {"error": {"message": "fake error 503", "type": "fake", '
    error += '"code": 503}}'
    await expect(page.locator("#waiting")).to_have_attribute(
        "title", f"JobFailure: detect_scene_break: {error}"
    )
    # Held there (the queue paused), the queue page says what the job waits for.
    async with aiohttp.ClientSession(headers={"X-Recap-Key": KEY}) as session:
        async with session.post(f"{served.url}/recap/api/queue/pause", json={}) as response:
            assert response.status == 200
        chat_page = page.url
        await page.click("a[href='#/queue']")
        state = page.locator("#jobs tr", has_text="detect_scene_break").locator("td.state")
        await expect(state.first).to_have_text("queued (retrying)")
        async with session.post(f"{served.url}/recap/api/queue/resume", json={}) as response:
            assert response.status == 200
    await page.goto(chat_page)
    await expect(label).to_have_text("100 % done", timeout=30000)
    # With the chat's memory off, Backfill says so instead of a bar that fills at 0 %.
    await page.click("a[href='#/']")
    await page.fill("#filter", "bea")
    await page.get_by_label("memory for Bea").select_option("off")
    await page.locator("#chats tbody tr:visible a").click()
    await expect(page.locator("#overview")).to_contain_text("memory off")
    await page.click("#backfill")
    await expect(page.locator(".toast.error")).to_have_text(
        "memory is off for this chat: nothing to backfill"
    )
    assert page.errors == []  # type: ignore[attr-defined]


async def test_a_long_chat_renders_only_what_is_in_view(served: Served, browser: Browser) -> None:
    long = Story(served.data, set(), char="Cyd")
    long.grow(5000)
    page = await open_dashboard(browser, served)
    await page.fill("#filter", "cyd")
    await expect(page.locator("#chats tbody tr:visible")).to_have_count(1)
    await page.locator("#chats tbody tr:visible a").click()
    open_scene = page.locator('details.scene[data-scene="open"]')
    await expect(open_scene).to_have_attribute("open", "")
    newest = page.locator('.msg[data-index="4999"]')
    await expect(newest).to_be_in_viewport()  # it opens where the story is now
    rendered = await page.locator(".msg").count()
    assert 0 < rendered < 400, rendered  # a few blocks, not 5,000 messages
    await page.mouse.wheel(0, -30000)  # back towards the start
    await expect(page.locator(".msg")).not_to_have_count(rendered)  # more as it scrolls


async def test_what_is_typed_in_the_filter_while_the_list_reloads_stays(
    served: Served, browser: Browser
) -> None:
    page = await open_dashboard(browser, served)
    ava = page.locator("#chats tbody tr", has_text="Ava")
    await expect(page.locator("#chats tbody tr")).to_have_count(2)
    # The list's next load is held until the user has typed.
    asked, typed = asyncio.Event(), asyncio.Event()

    async def hold(route: Route) -> None:
        asked.set()
        await typed.wait()
        await route.continue_()

    await page.route("**/recap/api/chats", hold)
    # A change made elsewhere reloads the list (its event reaches the page)...
    async with aiohttp.ClientSession(headers={"X-Recap-Key": KEY}) as session:
        url = f"{served.url}/recap/api/chats/{quote(CHAT_ID, safe='')}/memory"
        async with session.put(url, json={"enabled": False}) as response:
            assert response.status == 200
    await asyncio.wait_for(asked.wait(), 15)
    # ...and while it loads, the user filters.
    await page.fill("#filter", "bea")
    typed.set()
    await expect(ava.locator("select")).to_have_value("off")  # the list did reload
    await expect(page.locator("#filter")).to_have_value("bea")
    await expect(page.locator("#filter")).to_be_focused()
    await expect(ava).to_be_hidden()
    await expect(page.locator("#chats tbody tr", has_text="Bea")).to_be_visible()
    # A chat opened from the filtered list, and back: the list is as it was left.
    await page.unroute("**/recap/api/chats")
    await page.locator("#chats tbody tr:visible a").click()
    await expect(page.locator("#backfill")).to_be_visible()
    await page.click("a[href='#/']")
    await expect(page.locator("#chats tbody tr", has_text="Bea")).to_be_visible()
    await expect(page.locator("#filter")).to_have_value("bea")
    await expect(ava).to_be_hidden()
    assert page.errors == []  # type: ignore[attr-defined]


async def test_a_page_whose_answers_come_late_draws_nothing_over_the_one_shown_now(
    served: Served, browser: Browser
) -> None:
    """A chat opened, its answers slow (a busy machine), and the list opened again before
    they came: the list stays, and so does another chat opened meanwhile."""
    page = await open_dashboard(browser, served)
    await expect(page.locator("#chats tbody tr")).to_have_count(2)
    asked, answer, holding = asyncio.Event(), asyncio.Event(), [True]

    async def hold(route: Route) -> None:
        if holding[0]:
            asked.set()
            await answer.wait()
        await route.continue_()

    async def late(then: Callable[[], Awaitable[None]]) -> None:
        """Ava opened, its overview held while `then` runs, then let through."""
        holding[0] = True
        asked.clear()
        answer.clear()
        await page.locator("#chats tbody tr", has_text="Ava").locator("a").click()
        await asyncio.wait_for(asked.wait(), 15)
        await then()
        holding[0] = False
        answer.set()
        await page.evaluate("() => new Promise((done) => setTimeout(done, 500))")

    await page.route(f"**/recap/api/chats/{quote(CHAT_ID, safe='')}/memory", hold)

    async def to_the_list() -> None:
        await page.click("a[href='#/']")
        await expect(page.locator("#chats tbody tr")).to_have_count(2)

    await late(to_the_list)
    await expect(page.locator("#chats tbody tr")).to_have_count(2)
    await expect(page.locator("#chat-title")).to_have_count(0)

    # The same with another chat opened in between: Ava's answers do not become Bea's page.
    async def to_bea() -> None:
        await to_the_list()
        await page.locator("#chats tbody tr", has_text="Bea").locator("a").click()
        await expect(page.locator("#overview")).to_contain_text("30 messages")

    await late(to_bea)
    await expect(page.locator("#chat-title")).to_contain_text("Bea")
    await expect(page.locator("#overview")).to_contain_text("30 messages")
    assert page.errors == []  # type: ignore[attr-defined]


async def test_the_page_says_what_makes_the_proxy_degraded(
    served: Served, browser: Browser
) -> None:
    page = await open_dashboard(browser, served)
    await expect(page.locator("#chats tbody tr")).to_have_count(2)
    banner = page.locator("#health")
    await expect(banner).to_be_hidden()
    # ST's data folder moved away (a backup being restored, say): said above the view,
    # in /health's words, until it is back.
    away = served.data.with_name("away")
    served.data.rename(away)
    gone = "SillyTavern's data folder is missing (not there yet, or gone)"
    await expect(banner).to_contain_text(gone, timeout=30_000)
    await expect(banner).to_contain_text("recap-proxy doctor says what to do.")
    away.rename(served.data)
    await expect(banner).to_be_hidden(timeout=30_000)
    assert page.errors == []  # type: ignore[attr-defined]


async def test_a_recap_shows_the_models_reasoning_and_can_be_cleared(
    served: Served, browser: Browser
) -> None:
    served.fake.state.thinking = "The scene ends when they part at the door."
    await chat_request(served)
    chat = quote(CHAT_ID, safe="")
    headers = {KEY_HEADER: KEY}
    async with aiohttp.ClientSession(served.url, headers=headers) as session:

        async def recaps() -> list[dict[str, object]]:
            async with session.get(f"/recap/api/chats/{chat}/recaps") as answer:
                found: list[dict[str, object]] = await answer.json()
                return found

        async with session.put(f"/recap/api/chats/{chat}/messages/4/recap",
                               json={"recap": "Ava shows Tom the tracks."}) as answer:  # fmt: skip
            assert answer.status == 200
        for _ in range(400):  # the scene's recap, written in the background
            async with session.get(f"/recap/api/chats/{chat}/scenes") as answer:
                if any(s.get("recap") for s in await answer.json()):
                    break
            await asyncio.sleep(0.05)
        page = await open_dashboard(browser, served)
        await page.fill("#filter", "ava")
        await page.locator("#chats tbody tr:visible a").click()
        scene = page.locator('details.scene[data-scene="8"]')
        await expect(scene.locator("summary")).not_to_contain_text("no recap yet")
        await scene.locator("summary").click()
        await scene.get_by_role("button", name="Versions").click()
        reasoning = scene.locator(".versions-list details.reasoning")
        await reasoning.locator("summary").click()
        await expect(reasoning).to_contain_text("they part at the door")
        message = page.locator('.msg[data-index="4"]')
        await expect(message.locator(".mrecap")).to_contain_text("Ava shows Tom the tracks.")
        await message.hover()
        await message.get_by_role("button", name="Clear recap").click()
        await expect(message.locator(".mrecap")).to_have_count(0)
        assert not [r for r in await recaps() if r["index"] == 4]
    assert page.errors == []  # type: ignore[attr-defined]


async def test_a_group_chats_page_is_titled_by_the_group(served: Served, browser: Browser) -> None:
    """A group chat's file is named by its date only: the page says the group's name, the
    file under it, as a character chat's page names the character."""
    final_state(served.data / "default-user")
    group = quote(GROUP_ID, safe="")
    async with aiohttp.ClientSession(served.url, headers={KEY_HEADER: KEY}) as session:
        for _ in range(200):
            async with session.get(f"/recap/api/chats/{group}") as answer:
                if answer.status == 200:
                    name = (await answer.json())["name"]
                    break
            await asyncio.sleep(0.05)
    page = await open_dashboard(browser, served)
    await page.goto(f"{served.url}/recap/#/chat/{group}")
    title = page.locator("#chat-title")
    await expect(title).to_contain_text(name)
    await expect(page.locator("#chat-file")).to_have_text(GROUP_ID.rsplit("/", 1)[1])
    assert name and name != GROUP_ID.rsplit("/", 1)[1]
    assert page.errors == []  # type: ignore[attr-defined]


async def test_the_open_scene_can_be_checked_now(served: Served, browser: Browser) -> None:
    """The page says when the next scene-break check comes, and offers to look now."""
    await chat_request(served)
    page = await open_dashboard(browser, served)
    await page.fill("#filter", "ava")
    await page.locator("#chats tbody tr:visible a").click()
    opened = page.locator('details.scene[data-scene="open"]')
    await expect(opened.locator("summary")).to_contain_text("scene-break check")
    if await opened.get_attribute("open") is None:  # the open scene shows open already
        await opened.locator("summary").click()
    before = len(served.fake.state.operations)
    await opened.get_by_role("button", name="Check for a scene end now").click()
    # Either a check is queued (and the model asked), or the page says why none can run.
    toast = page.locator(".toast").last
    await expect(toast).to_have_text(re.compile("checking|no scene-break check can run now"))
    if (await toast.inner_text()) == "checking":
        for _ in range(200):
            if "detect_scene_break" in served.fake.state.operations[before:]:
                break
            await asyncio.sleep(0.05)
        assert "detect_scene_break" in served.fake.state.operations[before:]
    assert page.errors == []  # type: ignore[attr-defined]


async def test_the_key_is_asked_once_though_a_request_is_answered_after_it(
    served: Served, browser: Browser
) -> None:
    """The page's first requests all go without the key. One answered 401 after the key
    was given (the live stream, held here until then) is sent again with it: the key is
    not asked for a second time, and the stream connects."""
    release = asyncio.Event()

    async def late(route: Route) -> None:
        await release.wait()
        await route.continue_()

    page = await browser.new_page(viewport={"width": 1200, "height": 900})
    page.set_default_timeout(15000)
    await page.route("**/recap/api/events", late)
    await page.goto(served.url + "/recap/")
    await page.fill("#key-input", KEY)
    await page.click("#key-form button")
    await page.locator("#key-dialog").wait_for(state="hidden")
    release.set()
    await expect(page.locator("#live")).to_have_class(re.compile(r"\bon\b"))
    assert not await page.locator("#key-dialog").is_visible()


async def test_entities_are_searched_filtered_edited_merged_and_released(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    story = served.story
    story.messages[2]["mes"] += " [[Aldric: keeps the guild ledger]]"
    story.messages[6]["mes"] += (
        " [[Aldric: owes Tom a favour]] [[The Mill: burned down]] [[Mara: forges keys]]"
    )
    for message in story.messages:
        message["swipes"] = [message["mes"]]
    story.save()
    await chat_request(served)
    page = await open_dashboard(browser, served)
    await page.fill("#filter", "ava")
    await page.locator("#chats tbody tr:visible a").click()
    await expect(page.locator("#running-version")).to_have_text("running recap v1")
    await page.get_by_role("tab", name="Entities").click()
    rows = page.locator("#entities .entity")
    await expect(rows).to_have_count(3)
    await expect(page.locator("#entity-count")).to_have_text("3 entities")
    aldric = page.locator('.entity[data-entity="Aldric"]')
    await expect(aldric.locator(".facts li")).to_have_count(2)
    await expect(aldric.locator(".facts li").first).to_contain_text("keeps the guild ledger")

    # Search and filter.
    await page.fill("#entity-search", "ledger")
    await expect(rows).to_have_count(1)
    await expect(page.locator("#entity-count")).to_have_text("1 of 3")
    await page.fill("#entity-search", "")
    await page.select_option("#entity-type", "place")
    await expect(rows).to_have_count(0)
    await page.select_option("#entity-type", "")
    await expect(rows).to_have_count(3)

    # Edit: kept as written.
    await aldric.get_by_role("button", name="Edit").click()
    await page.fill("#entity-name", "Brother Aldric")
    await page.fill("#entity-aliases", "Aldric, the monk")
    await page.fill("#entity-facts", "Keeps the guild ledger.\nOwes Tom a favour.")
    await page.click("#entity-save")
    brother = page.locator('.entity[data-entity="Brother Aldric"]')
    await expect(brother.locator(".badge", has_text="yours")).to_be_visible()
    await expect(brother).to_contain_text("also Aldric, the monk")
    await expect(brother.locator(".facts li").first).to_contain_text("(yours)")

    # Merge the mill into him: one entity, both's facts.
    mill = page.locator('.entity[data-entity="The Mill"]')
    await mill.get_by_role("button", name="Merge into…").click()
    await page.select_option("#merge-into", "Brother Aldric")
    await page.click("#merge-save")
    await expect(rows).to_have_count(2)
    await expect(brother.locator(".facts")).to_contain_text("burned down")
    await screenshot(page, "entities", tmp_path)

    # Delete, then release back.
    mara = page.locator('.entity[data-entity="Mara"]')
    await mara.get_by_role("button", name="Delete").click()
    await expect(mara.locator(".badge", has_text="deleted")).to_be_visible()
    await mara.get_by_role("button", name="Release").click()
    await expect(mara.locator(".badge", has_text="deleted")).to_have_count(0)
    assert page.errors == []  # type: ignore[attr-defined]
