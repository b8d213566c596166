"""Real ST captures (ST 1.12.6) replayed into a temp data folder, saved the way ST saves."""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CAPTURE = Path(__file__).resolve().parent / "data" / "st-1.12.6"
MARKERS = ("[Start a new Chat]", "[Start a new group chat")
SOLO = "chats/default_Seraphina/Seraphina - 2023-5-12 @21h 32m 29s 224ms.jsonl"
SOLO_ID = "default-user/" + SOLO.removesuffix(".jsonl")
GROUP_ID = "default-user/group chats/2026-11-22@15h51m10s"


def save_like_st(path: Path, data: bytes) -> None:
    """Write a temp file beside the target and rename it over (write-file-atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{random.randint(10**8, 10**9)}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@dataclass(frozen=True)
class Step:
    kind: str  # "file" or "request"
    step: str
    t: float
    file: str = ""  # data path relative to the user folder
    data: bytes = b""
    body: dict[str, Any] | None = None


def timeline() -> list[Step]:
    """Every file version and every chat request of the capture, in time order."""
    steps: list[Step] = []
    versions = CAPTURE / "file_versions"
    for line in (versions / "index.jsonl").read_text(encoding="utf-8").splitlines():
        v = json.loads(line)
        data = (versions / v["version"]).read_bytes()
        steps.append(Step("file", v["step"], v["t"], v["file"], data))
    for line in (CAPTURE / "requests.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r["method"] == "POST":
            steps.append(Step("request", r["step"], r["ts_received"], body=r["body"]))
    return sorted(steps, key=lambda s: s.t)


def final_state(user_dir: Path) -> None:
    """The data folder as it was at the end of the capture."""
    for path in (CAPTURE / "final").rglob("*"):
        if path.is_file():
            target = user_dir / path.relative_to(CAPTURE / "final")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
