"""recap-proxy: long-term memory for SillyTavern, as a streaming reverse proxy.

    ST -> web/ (routes) -> adapters (parse) -> core (pure decisions) -> upstream -> LLM
            |   the answer streams back byte for byte                    |
            +-> /recap/api, CLI    providers (memory) <- library <- watcher <- ST data
                                        ^-- memory engine <- jobs <- llm  (background)

core/         pure: models, placement (ST rules), render, tokens, plan, identify, lore,
              replies, recaps, scenes, trim
web/          the HTTP edge: make_app wires; relay streams; routes and api map errors to answers
upstream      the only owner of the client session to LLM APIs
injection     parse -> memory -> decide -> splice, fail-open; shared by server and `inject`
sillytavern/  ST's files: chats, data-folder layout, reconciling versions, lorebooks and cards
store/        the only owner of SQLite: chats, messages, change log, lore snapshots, jobs,
              memory (message recaps, scenes and their recaps, running recap versions)
library       the mirror of ST's chats and the identification index (one worker thread)
watcher, lore the data folder followed live; lorebook snapshots per generated message
jobs, llm     the persistent operation queue and the LLM client for the proxy's own work
memory/       the engine: planner (changes -> jobs), handlers, prompts, branches, actions
cli_memory    the memory commands, through the running server's API
cassette      recorded exchanges (serve --record) that the tests replay
settings      the one pydantic model; errors: the error tree
"""

__version__ = "0.1.0"
