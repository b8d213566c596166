"""The application's keys: the running program whose routes the app serves, and the relay
the app made over it. Handlers are handed their parts at their routes; tests and the CLI
reach the parts through these."""

from __future__ import annotations

from aiohttp import web

from proxy.runtime.runtime import Runtime
from proxy.web.relay import Relay

RUNTIME = web.AppKey("runtime", Runtime)
RELAY = web.AppKey("relay", Relay)
