"""SillyTavern's on-disk formats: chat JSONL files, group files, the data-dir layout.

Read-only: nothing in this package writes under ST's data folder.
"""
