"""Typed application keys: the owners `make_app` wires in."""

from __future__ import annotations

from aiohttp import web

from proxy.injection import Injector
from proxy.library import ChatLibrary
from proxy.lore import LoreService
from proxy.memory.engine import MemoryEngine
from proxy.settings import Settings
from proxy.web.relay import Relay

SETTINGS = web.AppKey("settings", Settings)
RELAY = web.AppKey("relay", Relay)
INJECTOR = web.AppKey("injector", Injector)
LIBRARY = web.AppKey("library", ChatLibrary)
LORE = web.AppKey("lore", LoreService)
ENGINE = web.AppKey("engine", MemoryEngine)
