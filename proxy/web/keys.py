"""Typed application keys: the owners `make_app` wires in."""

from __future__ import annotations

from aiohttp import web

from adapters import Formats
from proxy.chat.injection import Injector
from proxy.chat.lore import LoreService
from proxy.events import EventBus
from proxy.library import ChatLibrary
from proxy.memory.actions import MemoryActions
from proxy.memory.engine import MemoryEngine
from proxy.memory.jobs import JobQueue
from proxy.metrics import Metrics
from proxy.reload import Reloader
from proxy.settings import Settings
from proxy.store import Store
from proxy.vitals import Vitals
from proxy.watcher import Watcher
from proxy.web.relay import Relay

SETTINGS = web.AppKey("settings", Settings)
FORMATS = web.AppKey("formats", Formats)
RELAY = web.AppKey("relay", Relay)
INJECTOR = web.AppKey("injector", Injector)
STORE = web.AppKey("store", Store)
LIBRARY = web.AppKey("library", ChatLibrary)
LORE = web.AppKey("lore", LoreService)
ENGINE = web.AppKey("engine", MemoryEngine)
QUEUE = web.AppKey("queue", JobQueue)
ACTIONS = web.AppKey("actions", MemoryActions)
EVENTS = web.AppKey("events", EventBus)
VITALS = web.AppKey("vitals", Vitals)
METRICS = web.AppKey("metrics", Metrics)
WATCHER = web.AppKey("watcher", Watcher)
RELOADER = web.AppKey("reloader", Reloader)
