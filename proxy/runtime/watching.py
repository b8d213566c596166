"""ST's folder followed while the program runs: the watch started, every chat indexed in
the background, and chats the store could not take read again once it takes writes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from proxy.library.chats import ChatLibrary
from proxy.library.watcher import Watcher
from proxy.settings import SillyTavernSettings
from proxy.store import file_error

log = logging.getLogger(__name__)


async def index(library: ChatLibrary) -> None:
    """Every chat of the folder read into the store and the index; a failure is logged."""
    try:
        count = await library.index_all()
        log.info("indexed %d SillyTavern chat(s) in %s", count, library.data_dir)
    except Exception as exc:
        if not file_error(exc):  # the store's own failure it has said itself
            log.exception("indexing %s failed", library.data_dir)


@contextlib.asynccontextmanager
async def watching(
    library: ChatLibrary, settings: SillyTavernSettings, watcher: Watcher, retry: float
) -> AsyncIterator[None]:
    """The folder watched (`settings.watch`) and indexed while the block runs; chats a
    failing store did not take read again every `retry` seconds until it takes them."""

    async def index_then_watch() -> None:
        # In the background: the proxy serves at once; identification starts with
        # whatever is indexed so far. The watch started first so that no save made
        # during indexing is missed.
        if settings.watch and not watcher.gone:
            # (A folder not there yet is read whole by the watcher once it is.)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher.ready.wait(), 5)
        if not watcher.gone:
            await index(library)
        # The store failing (a full disk) leaves chats behind their files, here or at a
        # save: they are read again once it takes writes, with no restart.
        while True:
            await library.fell_behind.wait()
            await asyncio.sleep(retry)
            try:
                count = await library.catch_up()
            except Exception as exc:
                if not file_error(exc):
                    log.exception("reading chats again after the store failed went wrong")
                continue
            log.info("%d SillyTavern chat(s) read again now that the store takes them", count)

    if settings.watch and not settings.force_polling:
        # Before indexing, so that every chat it installs is followed from then on.
        library.follow_changes()
    if settings.watch:
        # Entered before the proxy serves (a look at the folder and a task): `/health`
        # says a folder not there yet is missing from the first request on.
        await watcher.__aenter__()
    task = asyncio.create_task(index_then_watch(), name="st-index")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await watcher.__aexit__(None, None, None)
        library.stop_following()
