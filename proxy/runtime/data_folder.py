"""Which SillyTavern data folder the server reads, and where it may not write.

Taken once at start-up (`make_app`): the one configured, the one the store mirrors, or the
first of the usual places. A configured one that is not there yet is still taken, and
the watcher waits for it: a user who starts the proxy as a service before ST has ever run
(ST makes `data/` on its first start) or before a drive is mounted gets the memory once
the folder is there, with no restart.
"""

from __future__ import annotations

import logging
from pathlib import Path

from proxy.errors import ConfigError
from proxy.settings import Settings
from proxy.sillytavern.layout import (
    before_first_start,
    inside,
    looks_like_data_dir,
    same_folder,
    served_data_dir,
)
from proxy.store import mirrored_folder_of

log = logging.getLogger(__name__)


def writes_outside(data_dir: Path, settings: Settings, store: bool, record: bool) -> None:
    """Refuse a store (`store`) or cassette folder (`record`) set inside ST's data folder:
    the proxy never writes there (ST checks its files; the watcher would see our writes)."""
    places: list[tuple[str, Path, str]] = []
    if store:
        places.append(("store.path", settings.store.resolved_path(), " (the default is fine)"))
    if record and settings.server.record_dir is not None:
        places.append(("server.record_dir (--record)", settings.server.record_dir, ""))
    for key, path, default in places:
        if str(path) != ":memory:" and inside(data_dir, path):  # SQLite's in-memory store
            raise ConfigError(
                f"{key} = {path} is inside SillyTavern's data folder {data_dir}: recap-proxy "
                f"never writes there. Set it to a folder outside it{default}."
            )


def resolve_data_dir(settings: Settings) -> Path | None:
    """ST's data folder from the settings, the store or the usual places
    (`served_data_dir`), or None; what was taken, and why, is logged. One configured, or
    the one the store mirrors, that is not there yet is taken all the same: the watcher
    waits for it."""
    configured = settings.sillytavern.data_dir
    mirrored = mirrored_folder_of(settings.store.resolved_path()) if configured is None else None
    found = served_data_dir(configured, mirrored)
    if found is None:
        log.warning(
            "no SillyTavern data folder found in the usual places; set sillytavern.data_dir "
            "(or --st-data) for memory. Proxying without memory."
        )
        return None
    if configured is not None and found != configured:
        log.info("%s is not ST's data folder but holds it: using %s", configured, found)
    if not found.is_dir():
        if before_first_start(found):
            which = "ST makes it when it first starts"
        elif configured is None:
            which = "the one this store mirrors"
        else:
            which = "sillytavern.data_dir, or --st-data"
        return _awaited(found, settings, which)
    if configured is None:
        if mirrored is not None and same_folder(mirrored, found):
            log.info("using SillyTavern data folder %s, the one the store mirrors", found)
        else:
            log.info("using SillyTavern data folder %s", found)
    elif found == configured and not looks_like_data_dir(found):
        if made_by_st(found):
            # A fresh ST: it makes a user's chats/ with the first chat.
            log.info("%s has no chats yet; watching it for the first one", found)
        else:
            log.warning(
                "%s has no <user>/chats folder yet; is it ST's data/ folder? watching it anyway",
                found,
            )
    return found


# What ST writes into its data folder on its first start, before any chat.
ST_MADE = ("default-user", "_storage", "cookie-secret.txt")


def made_by_st(folder: Path) -> bool:
    """Whether `folder` holds what ST makes in its data folder before any chat."""
    return any((folder / name).exists() for name in ST_MADE)


def _awaited(folder: Path, settings: Settings, which: str) -> Path | None:
    """`folder`, not there (yet): ST not started once, a drive not mounted, a typo. The
    watcher looks for it and reads it once it is there; `/health` says it is missing
    meanwhile. None when watching is off (nothing would look) or it is a file."""
    if folder.exists():
        log.error("%s (%s) is a file, not SillyTavern's data folder; proxying without memory",
                  folder, which)  # fmt: skip
        return None
    if not settings.sillytavern.watch:
        log.error(
            "SillyTavern data folder %s (%s) does not exist, and with sillytavern.watch off "
            "it is not looked for; proxying without memory",
            folder,
            which,
        )
        return None
    log.warning(
        "SillyTavern data folder %s (%s) does not exist yet; proxying without memory until "
        "it does (looked for every few seconds, read once it is there)",
        folder,
        which,
    )
    return folder
