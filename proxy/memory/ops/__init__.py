"""The memory's operations, one module each, and what their handlers share (`handler`)."""
