"""The HTTP edge: `make_app` wires the owners together; `errors` turns the error tree
into answers; `relay` streams; `routes`, `api` and `memory_api` are the routes."""

from proxy.web.app import make_app

__all__ = ["make_app"]
