"""Settings from a file, the environment and the command line, and what a bad one says."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.models import Position, Role
from proxy.errors import ConfigError
from proxy.settings import Settings, load_settings, load_settings_partly


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_file_then_env_then_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[server]\nport = 9000\nhost = "127.0.0.2"\n'
        '[injection]\nposition = 1\ndepth = 4\nrole = "user"\n',
    )
    env = {
        "RECAP_PROXY_SERVER__PORT": "9100",
        "RECAP_PROXY_UPSTREAM__BASE_URL": "http://x/v1/",
        "RECAP_PROXY_INJECTION__CHATS_ENABLED": '{"a/b": false}',
        "OTHER": "1",
    }
    settings = load_settings(path, env=env, overrides={"server.host": "::1", "server.port": None})
    assert settings.server.port == 9100
    assert settings.server.host == "::1"
    assert settings.upstream.base_url == "http://x/v1"
    assert settings.injection.placement().position is Position.IN_CHAT
    assert settings.injection.depth == 4
    assert settings.injection.role is Role.USER
    assert settings.injection.chats_enabled == {"a/b": False}


def test_bad_value_names_key_and_expectation(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nport = "eighty"\n[injection]\nposition = "top"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    text = str(err.value)
    assert "server.port:" in text and "valid integer" in text and "'eighty'" in text
    assert "injection.position:" in text and "before_prompt (2)" in text
    assert str(path) in text


def test_unknown_key_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "[upstream]\nbaseurl = 'http://x'\n")
    with pytest.raises(ConfigError, match=r"upstream\.baseurl: unknown key"):
        load_settings(path, env={})


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # A slip of the keyboard, in a section, a sub-section and a route.
        (
            "[memory]\nmesage_recaps = 'always'\n",
            "memory.mesage_recaps: unknown key (did you mean message_recaps?)",
        ),
        ("[memory.llm]\nmodle = 'x'\n", "memory.llm.modle: unknown key (did you mean model?)"),
        (
            "[[upstream.routes]]\nprefix = '/c'\nbase_url = 'http://x/v1'\napikey = 'k'\n",
            "upstream.routes.0.apikey: unknown key (did you mean api_key?)",
        ),
        (
            "[memory.llm.operations.scene_recap]\ntemprature = 0.2\n",
            "memory.llm.operations.scene_recap.temprature: unknown key (did you mean temperature?)",
        ),
        # A key of another section, or of none.
        ("[upstream]\nport = 9\n", "upstream.port: unknown key (did you mean server.port?)"),
        ("port = 9\n", "port: unknown key (did you mean server.port?)"),
        ("[server]\nzzz = 1\n", "server.zzz: unknown key ["),
    ],
)
def test_unknown_key_says_what_was_meant(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(write(tmp_path, text), env={})
    assert said in str(err.value)


def test_unknown_env_key_says_what_was_meant() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(None, env={"RECAP_PROXY_SERVER__PROT": "1"})
    assert "server.prot: unknown key (did you mean port?) [from environment" in str(err.value)


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="RECAP_PROXY_INJECTION__DEPTH"):
        load_settings(None, env={"RECAP_PROXY_INJECTION__DEPTH": "-3"})


def test_api_key_never_appears_in_errors() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(None, env={"RECAP_PROXY_UPSTREAM__API_KEY": '{"k": "sk-secret"}'})
    assert "sk-secret" not in str(err.value)
    settings = load_settings(None, env={"RECAP_PROXY_UPSTREAM__API_KEY": "sk-secret"})
    assert "sk-secret" not in repr(settings)


@pytest.mark.parametrize(
    ("text", "message"),
    [("[server\nport = 1", "not valid TOML"), ("[upstream]\nbase_url = 'ftp://x'", "http://")],
)
def test_broken_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(write(tmp_path, text), env={})


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml", env={})


def test_an_empty_environment_variable_counts_as_unset() -> None:
    settings = load_settings(
        None, env={"RECAP_PROXY_UPSTREAM__API_KEY": "", "RECAP_PROXY_SERVER__PORT": "9000"}
    )
    assert settings.upstream.api_key is None and settings.server.port == 9000


def test_the_container_files_name_real_settings() -> None:
    """Every RECAP_PROXY_ variable the Dockerfile and the compose example set is a valid
    setting (with an access key, as a container listens on every interface)."""
    import re

    root = Path(__file__).resolve().parent.parent.parent
    text = (root / "Dockerfile").read_text() + (root / "compose.example.yaml").read_text()
    names = set(re.findall(r"(RECAP_PROXY_[A-Z_]+)", text))
    assert "RECAP_PROXY_SERVER__HOST" in names and "RECAP_PROXY_STORE__PATH" in names
    env = dict.fromkeys(names, "1")
    env |= {
        "RECAP_PROXY_SERVER__HOST": "0.0.0.0",
        "RECAP_PROXY_SERVER__ALLOWED_HOSTS": '["recap-proxy"]',
        "RECAP_PROXY_STORE__PATH": "/data/recap-proxy.sqlite3",
        "RECAP_PROXY_SILLYTAVERN__DATA_DIR": "/st-data",
        "RECAP_PROXY_UPSTREAM__BASE_URL": "https://api.openai.com/v1",
        "RECAP_PROXY_SILLYTAVERN__FORCE_POLLING": "true",
    }
    settings = load_settings(None, env=env)
    assert settings.server.allowed_hosts == ["recap-proxy"]
    for copied in re.findall(r"^COPY (\S+) ", (root / "Dockerfile").read_text(), re.M):
        assert (root / copied).exists(), copied


def test_partly_leaves_each_bad_key_at_its_default_and_keeps_the_rest(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'typo = 1\n[server]\nport = 9001\nhost = "127.0.0.3"\n'
        '[upstream]\nbase_url = "http://127.0.0.1:5011/v1"\nread_timeout = "soon"\n'
        '[[upstream.routes]]\nprefix = "/a"\n'  # no base_url: the route goes
        '[[upstream.routes]]\nprefix = "/b"\nbase_url = "http://127.0.0.1:5012/v1"\n'
        "[memory]\nrunning_recap_max_tokens = 999999\n",  # the section's own check fails
    )
    with pytest.raises(ConfigError):
        load_settings(path, env={})
    settings = load_settings_partly(path, env={"RECAP_PROXY_QUEUE__CONCURRENCY": "x"})
    assert (settings.server.port, settings.server.host) == (9001, "127.0.0.3")
    assert settings.upstream.base_url == "http://127.0.0.1:5011/v1"
    assert [r.prefix for r in settings.upstream.routes] == ["/b"]
    defaults = Settings()
    assert settings.upstream.read_timeout == defaults.upstream.read_timeout
    assert settings.memory == defaults.memory
    assert settings.queue.concurrency == defaults.queue.concurrency


def test_partly_of_a_file_that_cannot_be_read_is_its_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings_partly(write(tmp_path, "[server\n"), env={})
    good = write(tmp_path, "[server]\nport = 9002\n")
    assert load_settings_partly(good, env={}).server.port == 9002
