"""Where ST keeps things under its data folder, and which paths are chats.

    data/<user>/chats/<avatar key>/<chat name>.jsonl     character chats
    data/<user>/group chats/<chat name>.jsonl            group chats
    data/<user>/groups/<group id>.json                   group name, members, chat list
    data/<user>/settings.json                            the persona name (`username`)

A chat's id is its path relative to the data folder without `.jsonl`. ST's temp files
(`x.jsonl.<digits>`), backups and folders such as `_storage` are not chats.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import orjson

log = logging.getLogger(__name__)

CHATS = "chats"
GROUP_CHATS = "group chats"
SUFFIX = ".jsonl"
ChatKind = Literal["character", "group"]


@dataclass(frozen=True, slots=True)
class ChatLocation:
    chat_id: str
    user: str
    kind: ChatKind
    character: str | None  # the avatar-key folder of a character chat
    name: str  # the file name without .jsonl
    rel: str  # the path relative to the data folder, with .jsonl


def locate(rel: PurePosixPath | str) -> ChatLocation | None:
    """The chat a data-relative path is, or None when it is not a chat file."""
    parts = PurePosixPath(rel).parts
    if not parts or parts[0].startswith(("_", ".")) or not parts[-1].endswith(SUFFIX):
        return None
    name = parts[-1][: -len(SUFFIX)]
    if not name or name.startswith("."):
        return None
    user = parts[0]
    rel_text = "/".join(parts)
    if len(parts) == 4 and parts[1] == CHATS:
        return ChatLocation(rel_text[: -len(SUFFIX)], user, "character", parts[2], name, rel_text)
    if len(parts) == 3 and parts[1] == GROUP_CHATS:
        return ChatLocation(rel_text[: -len(SUFFIX)], user, "group", None, name, rel_text)
    return None


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, its links followed, stays in `root`: a symlink out of ST's data
    folder is not read (it could point anywhere on the machine)."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # unreadable, or a link loop
        return False


def same_folder(one: str | Path, other: str | Path) -> bool:
    """Whether two names of folders name the same one (`~`, `..` and links resolved)."""
    try:
        return Path(one).expanduser().resolve() == Path(other).expanduser().resolve()
    except (OSError, RuntimeError):  # a link loop
        return False


def scan(data_dir: Path, *, strict: bool = False) -> Iterator[ChatLocation]:
    """Every chat file under the data folder, for all users. `strict`: a data folder that
    cannot be listed (not there, not ours to read) raises, where otherwise it holds no
    chat (said in the log)."""
    try:
        users = sorted(p for p in data_dir.iterdir() if p.is_dir())
    except OSError as exc:
        if strict:
            raise
        log.error("cannot list ST data folder %s: %s", data_dir, exc.strerror)
        return
    for user_dir in users:
        for folder in (user_dir / CHATS, user_dir / GROUP_CHATS):
            try:
                if not folder.is_dir():
                    continue
            except OSError as exc:  # a folder we may not enter: the rest is still read
                log.warning("skipping %s: %s", folder, exc.strerror)
                continue
            for root, dirs, files in os.walk(folder):
                dirs.sort()
                for file in sorted(files):
                    path = Path(root, file)
                    location = locate(path.relative_to(data_dir).as_posix())
                    if location is not None and inside(data_dir, path):
                        yield location


def newest_first(data_dir: Path, locations: Iterable[ChatLocation]) -> list[ChatLocation]:
    """The chats, the most recently saved first (a file gone meanwhile last): indexed in
    this order after a restart, the chat in use is found within the first few, and its
    requests get their memory at once, not once the whole folder is read."""

    def saved(location: ChatLocation) -> float:
        try:
            return os.stat(data_dir / location.rel).st_mtime
        except OSError:
            return 0.0

    return sorted(locations, key=saved, reverse=True)


@dataclass(frozen=True, slots=True)
class GroupInfo:
    group_id: str
    name: str
    members: tuple[str, ...]  # avatar keys
    disabled: tuple[str, ...]
    # Chat name -> the chat it was branched from: before ST 1.15 a group chat's file had
    # no header, and its metadata (`main_chat` among it) lived in the group's file.
    main_chats: dict[str, str] = field(default_factory=dict)


def read_groups(user_dir: Path) -> dict[str, GroupInfo]:
    """Group chat name -> its group, from `groups/*.json`. Bad files are logged and skipped."""
    found: dict[str, GroupInfo] = {}
    folder = user_dir / "groups"
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        if not inside(user_dir, path):
            continue
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("skipping group file %s: %s", path, exc)
            continue
        if not isinstance(data, dict):
            continue
        info = GroupInfo(
            group_id=str(data.get("id") or path.stem),
            name=str(data.get("name") or path.stem),
            members=_strings(data.get("members")),
            disabled=_strings(data.get("disabled_members")),
            main_chats=_main_chats(data),
        )
        chats = [*_strings(data.get("chats")), *_strings([data.get("chat_id")])]
        for chat in chats:
            found[chat] = info
    return found


def _user_settings(user_dir: Path) -> dict[str, Any]:
    try:
        data = orjson.loads((user_dir / "settings.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def read_persona_name(user_dir: Path) -> str | None:
    """The user's current persona name (`username` in settings.json), if readable."""
    name = _user_settings(user_dir).get("username")
    return name if isinstance(name, str) and name else None


def read_regex_scripts(user_dir: Path) -> object:
    """The user's global regex scripts (`extension_settings.regex`), as ST keeps them."""
    extensions = _user_settings(user_dir).get("extension_settings")
    return extensions.get("regex") if isinstance(extensions, dict) else None


def read_prompt_format(user_dir: Path) -> dict[str, Any] | None:
    """How the user's ST writes a prompt: `{"instruct", "context", "reasoning"}`, its
    instruct template (`power_user.instruct`, used when `enabled`), context template
    (`power_user.context`: the `chat_start` line before the chat with instruct off) and
    reasoning template (`power_user.reasoning`: how a reply's thinking goes before its
    text), or None when settings.json has none of them."""
    power = _user_settings(user_dir).get("power_user")
    if not isinstance(power, dict):
        return None
    parts = {key: power.get(key) for key in ("instruct", "context", "reasoning")}
    if not any(isinstance(part, dict) for part in parts.values()):
        return None
    return {key: part if isinstance(part, dict) else {} for key, part in parts.items()}


def _main_chats(group: dict[str, Any]) -> dict[str, str]:
    """`main_chat` of each chat of a group file (ST before 1.15): the current chat's in
    `chat_metadata`, the others' in `past_metadata` by chat name."""
    past = group.get("past_metadata")
    metadata = dict(past) if isinstance(past, dict) else {}
    current = group.get("chat_id")
    if isinstance(current, str | int):
        metadata[str(current)] = group.get("chat_metadata")
    found: dict[str, str] = {}
    for chat, meta in metadata.items():
        main = meta.get("main_chat") if isinstance(meta, dict) else None
        if isinstance(main, str) and main:
            found[chat] = main
    return found


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(v) for v in value if isinstance(v, str | int) and str(v))


def looks_like_data_dir(path: Path) -> bool:
    """A folder with at least one user folder holding `chats` or `group chats`."""
    try:
        return any(
            (child / CHATS).is_dir() or (child / GROUP_CHATS).is_dir()
            for child in path.iterdir()
            if child.is_dir()
        )
    except OSError:
        return False


def is_install_folder(path: Path) -> bool:
    """SillyTavern's own folder (a clone or a release), which holds its data folder as
    `data/` once ST has run; told by the server script and the page ST serves."""
    try:
        return (path / "server.js").is_file() and (path / "public").is_dir()
    except OSError:
        return False


def before_first_start(path: Path) -> bool:
    """Whether `path` is the `data/` of an ST install that has not made it yet (ST makes
    it when it first starts)."""
    return path.name == "data" and not path.is_dir() and is_install_folder(path.parent)


def holds_st_user(path: Path) -> bool:
    """Stricter than `looks_like_data_dir`, for refusing to write somewhere: a user folder
    with its chats and its `settings.json`, as ST makes them (a home folder that happens to
    hold some `chats` folder is not ST's)."""
    try:
        return any(
            (child / "settings.json").is_file()
            and ((child / CHATS).is_dir() or (child / GROUP_CHATS).is_dir())
            for child in path.iterdir()
            if child.is_dir()
        )
    except OSError:
        return False


def data_dir_near(path: Path) -> Path | None:
    """ST's data folder when `path` is one of the folders people give for it instead: the
    install folder (`SillyTavern/`, whose `data/` it is) or a user folder
    (`data/default-user/`, whose parent it is). None when it is neither, or is the data
    folder itself."""
    if looks_like_data_dir(path):
        return None
    if looks_like_data_dir(path / "data"):
        return path / "data"
    if ((path / CHATS).is_dir() or (path / GROUP_CHATS).is_dir()) and looks_like_data_dir(
        path.parent
    ):
        return path.parent
    return None


def data_dir_for(configured: Path | None, mirrored: str | None = None) -> Path | None:
    """ST's data folder as every command takes it: the one configured (or the data folder
    it holds, `data_dir_near`), else the one the store mirrors (`mirrored`, the folder it
    was last served with) while it exists, else the first in the usual places; None when
    the one configured does not exist, or none is found."""
    if configured is None and mirrored is not None and Path(mirrored).is_dir():
        configured = Path(mirrored)
    if configured is None:
        return find_data_dir(Path.home(), Path.cwd(), dict(os.environ))
    if not configured.is_dir():
        return None
    return data_dir_near(configured) or configured


def served_data_dir(configured: Path | None, mirrored: str | None = None) -> Path | None:
    """The data folder `serve` reads: `data_dir_for`'s, but ST's own folder stands for its
    `data/` before ST has made it, and the one configured (else the one the store mirrors)
    is taken even when it is not there (yet): the watcher waits for it. None: none given
    and none found."""
    found = data_dir_for(configured, mirrored)
    if found is None:
        return configured or (Path(mirrored) if mirrored is not None else None)
    if found == configured and not looks_like_data_dir(found) and is_install_folder(found):
        return found / "data"
    return found


def candidate_data_dirs(home: Path, cwd: Path, environ: dict[str, str]) -> list[Path]:
    """Where ST's data folder usually is, most likely first."""
    found: list[Path] = []
    if environ.get("SILLYTAVERN_DATAROOT"):
        found.append(Path(environ["SILLYTAVERN_DATAROOT"]))
    for base in (
        cwd,
        home,
        home / "Documents",
        home / "Desktop",
        home / "src",
        home / "git",
        Path("/opt"),
        Path("/srv"),
    ):
        for name in ("SillyTavern", "sillytavern", "SillyTavern-Launcher/SillyTavern"):
            found.append(base / name / "data")
    found.append(cwd / "data")
    return found


def find_data_dir(home: Path, cwd: Path, environ: dict[str, str]) -> Path | None:
    for candidate in candidate_data_dirs(home, cwd, environ):
        if candidate.is_dir() and looks_like_data_dir(candidate):
            return candidate
    return None
