"""recap-proxy: long-term memory for SillyTavern, as a streaming reverse proxy.

The module map: folders are layers, bottom to top. A module imports only from its own
layer and those below (`tests/test_house.py` checks it, with every import counted).

    ST -> web -> chat (identify, memory view, placement) -> upstream -> LLM   the chat path
    ST's folder -> library (watcher, mirror, index) -> store                  the watch path
    store -> memory (plan -> queue -> LLM -> checked answer) -> store, views  the memory path

errors.py, tasks.py, waits.py
              the error tree (drawn once); background tasks held until they end; the
              proxy's own pauses and time limits (tests set them small)
core/         PURE decisions, no I/O: models, placement (ST's rules), render, tokens,
              plan, fingerprints, trim (covered history), recaps, scenes, recall, lore,
              genuine (is an answer a real one), guard, headers, export, operations
identify/     PURE: which chat, message and generation a request is: the chat index,
              matching (`match`: the ways a request's end meets its file's, a table),
              `readings` (each of ST's quirks named, in the order they are tried),
              endings (continue, swipe, impersonate), merged turns, changed replies,
              reasoning, ST's single user message taken apart (`single`)
adapters/     one module per wire format (OpenAI chat, Anthropic messages, text
              completions; instruct templates, post-processed and single-message
              prompts; spans: where messages sit in a body's bytes)
sillytavern/  ST's file formats: chat files, folder layout, reconcile (what a save
              changed), world info, extension data and settings, connection profiles
settings/     the one pydantic settings model (`model`, `memory`, `injection`, `section`),
              how it is loaded (file, environment, flags), the example it writes, where
              templates are found
store/        the one owner of SQLite and of its thread (`await store.call(fn)`): schema,
              chats, memory tables, jobs, lore snapshots, search, usage, the store lock
library/      THE WATCH PATH: `watcher` (ST's folder followed), `mirror` (chat files
              into the store, on its thread), `chats` (the library: the in-memory index
              and identification on the event loop)
upstream/     the one owner of the connections to LLM APIs (`upstreams`, its seam
              `UpstreamResponse`), aiohttp's client under it (`client`), cassettes
observe/      what the proxy tells of itself: events (the dashboard's stream), metrics
              (Prometheus), vitals (`/health`), logs
chat/         THE CHAT PATH: injection (parse -> memory -> decide -> splice, fail-open),
              providers (which memory a request gets, each reading of it tried),
              lore (world info per generation)
memory/       THE MEMORY PATH: engine (when a chat is planned), upkeep and planning
              (what it lacks), running (the running recap's coverage), chatinfo;
              ops/    one module per operation (message recap, scene break, scene recap,
                      running recap) and what their handlers share
              calls/  the persistent queue (`jobs`), the LLM client, prompts, answer
                      shapes and parsing, retries
              views/  what is read of the memory: the chat path's view and its
                      per-request step (`view`, `request`), recall, readout, reread
              edits/  corrections (`actions`), imports from extensions, branches,
                      memory carried between chats
runtime/      builds the parts (`runtime.build_runtime`), starts and stops them in
              order, the watch's lifetime, the data folder it reads, live reload
web/          the HTTP edge: `make_app(runtime)` wires routes and middlewares; the error
              middleware, the guard, the streaming relay, the APIs, the dashboard
doctor/       `recap-proxy doctor`: local checks, and those that ask over the network
cli/          `recap-proxy`: one module per command family (`main` dispatches)
"""

__version__ = "0.1.0"
