"""recap-proxy's settings: the model (`model`), how it is loaded (`loading`) and the
example config generated from it (`example`)."""

from proxy.settings.example import example_toml
from proxy.settings.loading import (
    ENV_NESTING,
    ENV_PREFIX,
    default_config_path,
    load_settings,
    load_settings_partly,
)
from proxy.settings.model import (
    QueueSettings,
    RecordSettings,
    ServerSettings,
    Settings,
    SillyTavernSettings,
    StoreSettings,
    UpstreamRoute,
    UpstreamSettings,
)

__all__ = [
    "ENV_NESTING",
    "ENV_PREFIX",
    "QueueSettings",
    "RecordSettings",
    "ServerSettings",
    "Settings",
    "SillyTavernSettings",
    "StoreSettings",
    "UpstreamRoute",
    "UpstreamSettings",
    "default_config_path",
    "example_toml",
    "load_settings",
    "load_settings_partly",
]
