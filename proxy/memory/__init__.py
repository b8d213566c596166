"""The memory path: chat changes become jobs; jobs' answers become memory.

engine.py      the planner (changes -> jobs) and the views the chat path reads
operations.py  the operations' names, queue order and job keys
jobs.py        the persistent queue that runs them; llm.py the proxy's own LLM calls
handlers.py    one handler per operation: input, prompt, LLM call, checked result
prompts.py     the operation templates, bundled or the user's
running.py     the running recap's coverage; chatinfo.py names and swipes
views.py       what a request reads of a chat's memory, built off the request path
actions.py     what the API and CLI can see and correct; branches.py inherited memory
settings.py    the `[memory]` settings (the tables are in `proxy/store/memory.py`)
"""
