"""The HTTP edge: `make_app` wires the owners together; routes map errors to answers."""

from proxy.web.app import make_app

__all__ = ["make_app"]
