"""recap-proxy: long-term memory for SillyTavern, as a streaming reverse proxy.

    ST --HTTP--> web/ (routes) --> adapters (parse) --> core (pure decisions) --> upstream --> LLM
                   |   the answer streams back byte for byte                        |
                   +--> /recap/api, CLI                providers (memory seam) <-- store (later)

core/      pure: models, placement (ST semantics), render ({{macros}}), tokens, plan
web/       the HTTP edge: make_app wires; relay streams; routes map errors to answers
upstream   the only owner of the client session to LLM APIs
injection  parse -> memory -> decide -> splice, fail-open; shared by server and `inject`
cassette   recorded exchanges (serve --record) that the tests replay
settings   the one pydantic model; errors: the error tree
"""

__version__ = "0.1.0"
