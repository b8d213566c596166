"""One handler per operation: read its input from the store, ask the LLM, check the answer,
and hand back the step that writes the result.

Each handler also says what its input is (`input_hash`): the planner stamps a job with it,
and the queue applies a result only while the input is unchanged, so a recap is never
written onto a message that was edited, swiped or deleted meanwhile.
"""

from __future__ import annotations

from proxy.core.operations import Operation
from proxy.memory.ops.condense_entity import CondenseEntityHandler
from proxy.memory.ops.handler import HandlerContext, OperationHandler
from proxy.memory.ops.message_recap import MessageRecapHandler
from proxy.memory.ops.running_recap import CondenseHandler, RunningRecapHandler
from proxy.memory.ops.scene_break import DetectHandler
from proxy.memory.ops.scene_recap import SceneRecapHandler


def handlers(context: HandlerContext) -> dict[Operation, OperationHandler]:
    return {
        h.operation: h
        for h in (
            MessageRecapHandler(context),
            DetectHandler(context),
            SceneRecapHandler(context),
            RunningRecapHandler(context),
            CondenseHandler(context),
            CondenseEntityHandler(context),
        )
    }
