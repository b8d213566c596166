"""The running program: its parts built, started and stopped in order, and reloaded."""
