"""The operations' names, queue order and job keys."""

from __future__ import annotations

from proxy.core.operations import OPERATIONS, PRIORITIES, Operation, job_key


def test_every_operation_has_a_place_in_the_queue_and_folding_comes_first() -> None:
    assert set(PRIORITIES) == set(OPERATIONS)
    order = sorted(OPERATIONS, key=PRIORITIES.__getitem__)
    assert order[:2] == [Operation.CONDENSE_RUNNING_RECAP, Operation.RUNNING_RECAP]
    assert order[-1] is Operation.MESSAGE_RECAP


def test_a_job_key_is_one_per_operation_chat_and_subject_and_a_rerun_stands_apart() -> None:
    chat = "u/chats/Ava/one"
    assert job_key(Operation.DETECT_SCENE_BREAK, chat) == f"detect_scene_break:{chat}"
    assert job_key(Operation.SCENE_RECAP, chat, 7) == f"scene_recap:{chat}:7"
    assert job_key(Operation.SCENE_RECAP, chat, 7, again=True) == f"scene_recap:{chat}:7:again"
    keys = {job_key(op, chat, 1) for op in OPERATIONS} | {job_key(op, chat, 2) for op in OPERATIONS}
    assert len(keys) == 2 * len(OPERATIONS)
