"""Typed application keys: the owners `make_app` wires in."""

from __future__ import annotations

from aiohttp import web

from adapters import Formats
from proxy.chat.injection import Injector
from proxy.chat.lore import LoreService
from proxy.library.chats import ChatLibrary
from proxy.library.watcher import Watcher
from proxy.memory.calls.jobs import JobQueue
from proxy.memory.edits.actions import MemoryActions
from proxy.memory.engine import MemoryEngine
from proxy.observe.events import EventBus
from proxy.observe.metrics import Metrics
from proxy.observe.vitals import Vitals
from proxy.runtime.reload import Reloader
from proxy.settings import Settings
from proxy.store import Store
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
