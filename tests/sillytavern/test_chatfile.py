"""Every chat file format ST has written, and every way a file can be broken."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.sillytavern.chatfile import (
    ChatFile,
    RecentSplits,
    SplitFile,
    STMessage,
    normalize_send_date,
    parse_chat,
    split_file,
)
from tests.st_data import CAPTURE, SOLO, timeline

HEADER_115 = {
    "chat_metadata": {"integrity": "0d1f", "main_chat": "Parent"},
    "user_name": "unused",
    "character_name": "unused",
}
HEADER_OLD = {
    "user_name": "Alex",
    "character_name": "Seraphina",
    "create_date": "2024-05-01@14h03m22s",
    "chat_metadata": {"tainted": True},
}
GREETING = {
    "name": "Seraphina",
    "is_user": False,
    "is_system": False,
    "send_date": "2026-05-01T12:03:22.130Z",
    "mes": "Welcome, {{user}}.",
    "extra": {},
}
USER = {
    "name": "Alex",
    "is_user": True,
    "is_system": False,
    "send_date": "May 1, 2024 2:03pm",
    "mes": "Where am I?",
    "extra": {"isSmallSys": False},
}
REPLY = {
    "extra": {"api": "custom", "model": "m"},
    "name": "Seraphina",
    "is_user": False,
    "send_date": 1714572202000,
    "mes": "In Eldoria.",
    "swipe_id": 1,
    "swipes": ["In my glade.", "In Eldoria."],
    "swipe_info": [{}, {}],
}
HIDDEN = {**USER, "is_system": True, "mes": "(OOC: brb)"}
NARRATOR = {
    "name": "System",
    "is_user": False,
    "is_system": False,
    "mes": "Night falls.",
    "extra": {"type": "narrator"},
}


def every(chat: ChatFile) -> list[STMessage]:
    """The messages of a fully parsed chat (none left to parse on demand)."""
    assert all(m is not None for m in chat.messages)
    return [m for m in chat.messages if m is not None]


def jsonl(*objects: object, end: bytes = b"") -> bytes:
    return b"\n".join(json.dumps(o).encode() for o in objects) + end


def test_current_format() -> None:
    chat = parse_chat(jsonl(HEADER_115, GREETING, USER, REPLY, HIDDEN, NARRATOR))
    assert chat.header is not None
    assert chat.header.integrity == "0d1f" and chat.header.main_chat == "Parent"
    assert [m.name for m in every(chat)] == ["Seraphina", "Alex", "Seraphina", "Alex", "System"]
    greeting, user, reply, hidden, narrator = every(chat)
    assert greeting.is_system is False and greeting.mes == "Welcome, {{user}}."
    assert user.is_user and not user.hidden
    assert reply.is_system is False  # missing means visible
    assert reply.swipe_count == 2 and reply.swipe_id == 1
    assert hidden.hidden
    assert narrator.narrator and not narrator.hidden
    assert chat.bad == []


def test_old_header_and_date_forms() -> None:
    chat = parse_chat(jsonl(HEADER_OLD, GREETING, USER, REPLY))
    assert chat.header is not None and chat.header.character_name == "Seraphina"
    assert chat.header.integrity is None
    assert every(chat)[0].send_date == "2026-05-01T12:03:22.130Z"
    assert every(chat)[1].send_date == "2024-05-01T14:03"
    assert every(chat)[2].send_date == "2024-05-01T14:03:22.000+00:00"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("November 22, 2026 3:50pm", "2026-11-22T15:50"),
        (1714572202, "2024-05-01T14:03:22.000+00:00"),
        ("something else", "something else"),
        ("Nov 22, 2026 3:50pm", "2026-11-22T15:50"),
        ("November 22, 2026 3:50 pm", "2026-11-22T15:50"),
        ("  November 22, 2026 3:50pm ", "2026-11-22T15:50"),
        ("2026-11-22T15:50:00.000Z", "2026-11-22T15:50:00.000Z"),
        ("22 November 2026", "22 November 2026"),
        ("", ""),
        (None, None),
        (True, None),
    ],
)
def test_send_date_forms(value: object, expected: str | None) -> None:
    assert normalize_send_date(value) == expected


def test_group_chat_without_header() -> None:
    chat = parse_chat(jsonl(GREETING, USER))
    assert chat.header is None
    assert len(chat.messages) == 2


def test_bom_crlf_and_trailing_newline() -> None:
    data = b"\xef\xbb\xbf" + jsonl(HEADER_115, GREETING, USER).replace(b"\n", b"\r\n") + b"\r\n"
    chat = parse_chat(data)
    assert chat.header is not None
    assert [m.mes for m in every(chat)] == [GREETING["mes"], USER["mes"]]


def test_malformed_lines_are_skipped_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    data = b"\n".join(
        [
            json.dumps(HEADER_115).encode(),
            json.dumps(GREETING).encode(),
            b"{not json",
            b"[1, 2]",
            json.dumps({**USER, "is_user": {"x": 1}, "name": ["bad"]}).encode(),
            json.dumps(USER).encode(),
        ]
    )
    with caplog.at_level(logging.WARNING):
        chat = parse_chat(data, source="x.jsonl")
    assert [m.mes for m in every(chat)] == [GREETING["mes"], USER["mes"]]
    assert [b.number for b in chat.bad] == [3, 4, 5]
    assert "x.jsonl: skipped 3 malformed line(s): line 3: not JSON" in caplog.text


def test_a_line_with_bytes_that_are_not_utf8_is_read_as_st_reads_it() -> None:
    # ST decodes with each bad sequence replaced (node's 'utf8') and keeps the message:
    # skipping it would shift every later message's index away from ST's.
    broken = json.dumps(GREETING).encode().replace(b"Welcome", b"Wel\xff\xfecome")
    assert broken != json.dumps(GREETING).encode()
    chat = parse_chat(
        b"\n".join([json.dumps(HEADER_115).encode(), broken, json.dumps(USER).encode()])
    )
    assert not chat.bad
    texts = [m.mes for m in every(chat)]
    assert texts == [str(GREETING["mes"]).replace("Welcome", "Wel\ufffd\ufffdcome"), USER["mes"]]
    # A header so broken is still the header.
    header = json.dumps(HEADER_115).encode().replace(b"Parent", b"Par\xc3ent")
    chat = parse_chat(b"\n".join([header, json.dumps(USER).encode()]))
    assert chat.header is not None and chat.header.main_chat == "Par\ufffdent"


def test_real_capture_files() -> None:
    solo = CAPTURE / "final" / "chats" / "default_Seraphina"
    chat = parse_chat(next(solo.glob("*.jsonl")).read_bytes())
    assert chat.header is not None and chat.header.character_name == "Seraphina"
    assert len(chat.messages) == 16 and chat.bad == []
    group = parse_chat(next((CAPTURE / "final" / "group chats").glob("*.jsonl")).read_bytes())
    assert group.header is None
    assert every(group)[0].hidden  # "Group chat created" notice
    assert {m.name for m in every(group)[1:]} == {"Orin", "Seraphina", "User"}


def test_large_file_parses() -> None:
    lines = [HEADER_115] + [
        {**REPLY, "mes": f"reply {i} " + "words " * 300} if i % 2 else {**USER, "mes": f"u {i}"}
        for i in range(10_000)
    ]
    chat = parse_chat(jsonl(*lines))
    assert len(chat.messages) == 10_000


def test_known_lines_are_not_parsed_again() -> None:
    first = parse_chat(jsonl(HEADER_115, GREETING, USER))
    known = {line.digest for line in first.lines}
    again = parse_chat(jsonl(HEADER_115, GREETING, USER, REPLY), known=known)
    assert again.messages[:2] == [None, None]
    assert again.messages[2] is not None and again.messages[2].mes == "In Eldoria."
    assert again.message(1) == first.messages[1]  # parsed on demand


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_no_byte_sequence_crashes_the_parser(data: bytes) -> None:
    chat = parse_chat(data)
    assert len(chat.messages) + len(chat.bad) <= data.count(b"\n") + 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.dictionaries(
                st.text(max_size=8),
                st.recursive(
                    st.none()
                    | st.booleans()
                    | st.integers()
                    | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda inner: (
                        st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
                    ),
                    max_leaves=6,
                ),
            ),
            st.text(max_size=30),
        ),
        max_size=6,
    )
)
def test_no_json_shape_crashes_the_parser(objects: list[object]) -> None:
    data = b"\n".join(json.dumps(o).encode() for o in objects)
    parse_chat(data)


def test_the_character_is_named_by_the_chat_never_by_its_folder() -> None:
    # ST up to 1.14 writes the name in the header; 1.15+ writes "unused" there.
    assert parse_chat(jsonl(HEADER_OLD, GREETING, USER)).character_name() == "Seraphina"
    assert parse_chat(jsonl(HEADER_115, GREETING, USER, HIDDEN)).character_name() == "Seraphina"
    # the newest character message speaks for it; users, hidden lines and narrators do not
    renamed = {**REPLY, "name": "Sera"}
    chat = parse_chat(jsonl(HEADER_115, GREETING, renamed, USER, NARRATOR))
    assert chat.character_name() == "Sera"
    assert parse_chat(jsonl(HEADER_115, USER, NARRATOR)).character_name() is None


def test_each_save_is_split_from_the_lines_the_previous_version_kept() -> None:
    # ST's own saves of one chat, in order: sends, replies, a swipe, an edit, a delete.
    versions = [step.data for step in timeline() if step.kind == "file" and step.file == SOLO]
    before: SplitFile | None = None
    reused = []
    for data in versions:
        split = split_file(data, before)
        # The same lines, offsets and digests as splitting the file from scratch.
        assert split.lines == split_file(data).lines
        again, fresh = parse_chat(data, before=before), parse_chat(data)
        assert again.lines == fresh.lines and again.messages == fresh.messages
        reused.append(split.reused)
        if split.reused:  # all of the old file's lines but its last
            assert before is not None and split.reused == len(before.lines) - 1
        before = split
    # Every save kept the lines before its last one, except the first version, the second
    # (ST's first save rewrote the header) and the edit and the delete of an older message
    # (16 and 17): those are split whole.
    assert [i for i, n in enumerate(reused) if n == 0] == [0, 1, 16, 17], reused


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.text(max_size=12), min_size=1, max_size=8),
    st.sampled_from(["append", "last", "middle", "delete", "header", "crlf", "bom", "blank"]),
    st.text(max_size=12),
)
def test_a_split_taken_over_from_before_equals_a_fresh_one(
    texts: list[str], change: str, new_text: str
) -> None:
    def file(items: list[str], *, header: Mapping[str, object] = HEADER_115) -> bytes:
        return jsonl(header, *({**USER, "mes": t} for t in items))

    old = file(texts)
    if change == "append":
        new = file([*texts, new_text])
    elif change == "last":
        new = file([*texts[:-1], new_text])
    elif change == "middle":
        new = file([new_text, *texts[1:]])
    elif change == "delete":
        new = file(texts[1:])
    elif change == "header":
        new = file(texts, header={**HEADER_115, "chat_metadata": {"integrity": new_text}})
    elif change == "crlf":
        new = file([*texts, new_text]).replace(b"\n", b"\r\n")
    elif change == "bom":
        new = b"\xef\xbb\xbf" + file([*texts, new_text])
    else:
        new = file(texts) + b"\n\n   \n" + json.dumps({**USER, "mes": new_text}).encode()
    before = split_file(old)
    assert split_file(new, before).lines == split_file(new).lines
    assert parse_chat(new, before=before).messages == parse_chat(new).messages


def test_recent_splits_keep_the_newest_within_their_budget() -> None:
    def split(size: int) -> SplitFile:
        return split_file(b"{}" + b" " * (size - 2))

    kept = RecentSplits(budget=100)
    kept.keep("a", split(40))
    kept.keep("b", split(40))
    kept.keep("a", split(30))  # saved again: replaces its old split, becomes the newest
    assert (len(kept), kept.size) == (2, 70)
    kept.keep("c", split(50))  # over budget: the oldest ("b") goes
    assert kept.take("b") is None
    assert kept.take("a") is not None and kept.size == 50
    kept.keep("huge", split(101))  # larger than the whole budget: never kept
    assert kept.take("huge") is None and len(kept) == 1
    few = RecentSplits(budget=1000, count=2)
    for key in "xyz":
        few.keep(key, split(10))
    assert few.take("x") is None and len(few) == 2  # the oldest of three goes
