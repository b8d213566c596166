"""recap-proxy: long-term memory for SillyTavern, as a streaming reverse proxy.

    ST -> web/ -> chat/ (identify, memory, place: core) -> upstream -> LLM     the chat path
                     ^ views            the answer streams back byte for byte
    ST data -> watcher -> library (sillytavern/ formats) -> store            the watch path
    store -> memory/ engine -> jobs -> llm -> handlers -> store (views)      the memory path

core/         PURE: models, placement (ST rules), render, tokens, plan, identify, lore,
              replies, recaps, scenes, trim, jsontypes (no I/O, clocks or network)
chat/         the chat path: injection (fail-open body step, also `inject`), providers
              (which memory a request gets), lore (lorebook snapshots per generation)
watcher, library, sillytavern/   the watch path: ST's files followed live, mirrored, indexed
memory/       the memory path: engine, operations, jobs, llm, handlers, prompts, views,
              running, actions, branches, settings
store/        the only owner of SQLite and of its one thread (`await store.call(fn)`)
upstream      the only owner of the client session to LLM APIs; maps its errors once
web/          the HTTP edge: app wires, errors answers, relay streams, routes and the APIs
errors        the error tree; settings/ the one pydantic model (base: leaf building blocks)
tasks         background tasks held until they end; template_files, cassette, cli*
"""

__version__ = "0.1.0"
