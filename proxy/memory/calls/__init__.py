"""The memory's LLM work: the persistent queue, the calls, their prompts and answers."""
