"""Which chat, which message and which kind of generation a request is. Pure."""
