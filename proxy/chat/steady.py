"""The memory step for a chat's everyday request, in one pass.

Most chat requests are alike: ST's JSON of plain string messages, a few KiB of it, whose
newest messages one indexed chat holds, a chat whose upkeep runs and whose file is as the
index has it. For those, `Injector.prepare`'s general step also goes through two more
coroutines (`ChatMemory.memory_for`, `ChatLibrary.identify_request`) and the
parsed-request record it shares with the adapter. Where it runs, between the other
processes of a busy machine, most of the step's cost is that of bringing its code and
records back into the CPU's caches, so less of them is less time: this does the same work,
each decision (the history, the fit, the memory, the placement) by the same function, in
a tenth to a sixth less time (timed inside the serving process, under a load like
bench/overhead.py's, three runs: p50 89 against 101 us, 104 against 116, 132 against 161;
bench/step_cost.py, its small body with the fields ST sends: 356k instructions and 5,008
last-level cache misses against 376k and 5,275).

What it cannot take it declines (None) before anything is done for the request, and the
general step runs: another wire format, a large body (spliced, not re-encoded), a
message with more than a role, a content and a name, a chat named by a header or by
ST-Auto-Recap's metadata, a request that several chats or none could hold, a chat whose
file ST saved since it was read, a chat's first request (its upkeep starts and is waited
for). tests/chat/test_steady.py checks that both give the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from adapters.openai_chat import OpenAIChatAdapter
from proxy.chat.providers import CHAT_ID_HEADER, ChatMemory
from proxy.core.models import Caller, Outcome
from proxy.core.placement import find_history
from proxy.core.plan import InjectionPolicy, MemoryTemplates, left_out, plan_insertions
from proxy.core.st_metadata import find_st_metadata
from proxy.identify.match import identify, prints


def steady_step(
    provider: ChatMemory,
    wire: OpenAIChatAdapter,
    raw: bytes,
    headers: Mapping[str, str],
    policy: InjectionPolicy,
    templates: MemoryTemplates,
    count_tokens: Callable[[str], int],
    route: str,
    path: str,
) -> Outcome | None:
    """The body for upstream and what went into it, as `Injector.prepare` would give
    them; None when this request is not one this takes. `route`, `path`: the upstream
    route prefix the request came under and its path there."""
    engine = provider.engine
    if engine is None or headers.get(CHAT_ID_HEADER):
        return None
    read = wire.read_plain(raw)
    if read is None:
        return None
    body, messages, model = read
    span = find_history(messages, policy.history_start_markers)
    if not span.indices or find_st_metadata(messages) is not None:
        return None
    library = provider.library
    index = library.index
    printed = prints(messages, span, index)
    chats = printed.candidates(index)
    if len(chats) != 1:
        return None
    (chat_id,) = chats
    if chat_id not in engine.active or not library.settled(chat_id):
        return None
    ident = identify(messages, span, index, printed=printed)
    if ident is None:
        return None
    # Nothing was done for the request until here; from here on it is this step's.
    engine.touch(ident, headers, Caller(model, wire.name, route, path))
    memory = provider.known(ident, messages, span, model, {})
    insertions = plan_insertions(messages, memory, policy, templates, count_tokens)
    drop = left_out(memory, insertions)
    sent = wire.put_plain(body, insertions, drop) if insertions else raw
    return Outcome(sent, insertions, memory, messages, drop)
