"""The memory engine: chat changes become jobs; jobs' answers become memory.

settings.py  the `[memory]` settings
tables.py    (in `proxy/store/memory.py`) recaps, scenes, running recap versions
prompts.py   the operation templates, bundled or the user's
engine.py    the planner (changes -> jobs) and the memory each request gets
handlers.py  one handler per operation: prompt, LLM call, checked result
"""
