"""The memory path: chat changes become jobs, jobs' checked answers become memory (the
module map is in `proxy/__init__.py`)."""
