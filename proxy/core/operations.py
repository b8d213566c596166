"""The proxy's own LLM operations: their names, their order in the queue, their job keys.

A leaf module: the settings (per-operation overrides), the queue (priorities), the
planner and the API (job keys) all name operations through it, never by loose strings.
"""

from __future__ import annotations

from enum import StrEnum


class Operation(StrEnum):
    MESSAGE_RECAP = "message_recap"
    DETECT_SCENE_BREAK = "detect_scene_break"
    SCENE_RECAP = "scene_recap"
    RUNNING_RECAP = "running_recap"
    CONDENSE_RUNNING_RECAP = "condense_running_recap"
    CONDENSE_ENTITY = "condense_entity"


OPERATIONS: tuple[Operation, ...] = tuple(Operation)

# Lower runs first: folding a finished scene into the running recap matters most, a
# message recap least.
PRIORITIES: dict[Operation, int] = {
    # A running recap over its budget is condensed before anything is folded onto it.
    Operation.CONDENSE_RUNNING_RECAP: 5,
    Operation.RUNNING_RECAP: 10,
    Operation.SCENE_RECAP: 20,
    Operation.DETECT_SCENE_BREAK: 30,
    # An entity's card over its budget still reaches a request (its newest facts).
    Operation.CONDENSE_ENTITY: 35,
    Operation.MESSAGE_RECAP: 40,
}


def job_key(
    operation: Operation, chat_id: str, subject: int | None = None, *, again: bool = False
) -> str:
    """The dedup key of a job: one live job per operation, chat and subject (a scene's or
    a batch's first message uid; detection has none). `again` keys a rerun the user asked
    for apart from the planner's own job, so that neither replaces the other."""
    key = f"{operation.value}:{chat_id}"
    if subject is not None:
        key += f":{subject}"
    return key + ":again" if again else key
