"""`recap-proxy doctor`: each check against a data folder, an upstream up and down, and a
proxy running or not."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from proxy.cli.main import main
from tests.conftest import FakeLLM
from tests.memory.story import Story
from tests.test_serve_e2e import free_port, launch, stop, wait_for_port

SETTINGS = Path(__file__).parent.parent / "data" / "st-settings"


def setup(tmp_path: Path, upstream: str, st_settings: str = "claude") -> tuple[Path, Path, int]:
    data = tmp_path / "st" / "data"
    Story(data, set()).grow(4)
    shutil.copy(SETTINGS / f"{st_settings}.json", data / "default-user" / "settings.json")
    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(
        f'[upstream]\nbase_url = "{upstream}"\n[store]\npath = "{tmp_path / "s.sqlite3"}"\n'
        f"[server]\nport = {port}\n",
        encoding="utf-8",
    )
    return data, config, port


def doctor(
    config: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--config", str(config), "--st-data", str(data), "--json"])
    report = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in report["checks"]} | {"ok": report["ok"]}


def set_st_url(data: Path, url: str) -> None:
    path = data / "default-user" / "settings.json"
    st = json.loads(path.read_text(encoding="utf-8"))
    st["oai_settings"]["reverse_proxy"] = url
    path.write_text(json.dumps(st), encoding="utf-8")


async def test_st_pointing_elsewhere_is_named_with_the_value_to_set(
    tmp_path: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    data, config, port = setup(tmp_path, fake_llm.base_url)
    with config.open("a", encoding="utf-8") as extra:  # a route, probed as well
        extra.write(f'[[upstream.routes]]\nprefix = "/local"\nbase_url = "{fake_llm.base_url}"\n')
    code, checks = await _doctor(config, data, capsys)
    assert code == 1 and checks["ok"] is False
    assert checks["route /local"]["ok"] is True
    st = checks["ST (default-user) uses the proxy"]
    assert st["ok"] is False and "oai_settings.reverse_proxy" in st["detail"]
    assert "http://127.0.0.1:5011/v1" in st["detail"]  # what it is now
    assert st["fix"].endswith(f"to http://127.0.0.1:{port}/v1")
    # Fixed in ST: now it passes, and with the upstream up, all does.
    set_st_url(data, f"http://localhost:{port}/v1")
    code, checks = await _doctor(config, data, capsys)
    assert checks["ST (default-user) uses the proxy"]["ok"] is True
    assert checks["upstream"]["ok"] is True and "(200)" in checks["upstream"]["detail"]
    assert (
        checks["SillyTavern data"]["ok"] is True
        and "1 chat(s)" in checks["SillyTavern data"]["detail"]
    )
    assert checks["config"]["ok"] and checks["store"]["ok"] and checks["tokenizer"]["ok"]
    assert checks["port"]["ok"] and "not running" in checks["port"]["detail"]
    assert code == 0 and checks["ok"] is True


async def test_every_prompt_post_processing_passes(
    tmp_path: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    """The proxy takes every post-processed prompt of ST's, a single user message among
    them: none is a check of its own."""
    data, config, port = setup(tmp_path, fake_llm.base_url)
    path = data / "default-user" / "settings.json"
    st = json.loads(path.read_text(encoding="utf-8"))
    oai = st["oai_settings"]
    oai |= {"chat_completion_source": "custom", "custom_url": f"http://127.0.0.1:{port}/v1"}
    for mode in ("", "semi", "strict", "single"):
        oai["custom_prompt_post_processing"] = mode
        path.write_text(json.dumps(st), encoding="utf-8")
        code, checks = await _doctor(config, data, capsys)
        assert checks["ST (default-user) uses the proxy"]["ok"] is True
        assert "ST (default-user) prompt post-processing" not in checks and code == 0


async def test_an_upstream_down_and_a_missing_data_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:
    down = f"http://127.0.0.1:{refused_port}/v1"
    _, config, _ = setup(tmp_path, down)
    code, checks = await _doctor(config, tmp_path / "nowhere", capsys)
    assert code == 1
    assert checks["upstream"]["ok"] is False and "does not answer" in checks["upstream"]["detail"]
    assert "[upstream] base_url" in checks["upstream"]["fix"]
    data = checks["SillyTavern data"]
    assert data["ok"] is False and "data_dir" in data["fix"]
    # As serve takes it: waited for, read once it is there.
    assert data["detail"].startswith(f"{tmp_path / 'nowhere'} does not exist (yet): the proxy ")
    # ST's own folder, before ST first started: its data/ is the one waited for.
    install = tmp_path / "SillyTavern"
    (install / "public").mkdir(parents=True)
    (install / "server.js").write_text("// ST's server\n", encoding="utf-8")
    _, checks = await _doctor(config, install, capsys)
    data = checks["SillyTavern data"]
    assert data["detail"].startswith(f"{install / 'data'} does not exist (yet)"), data
    assert data["fix"] == "start SillyTavern once (it makes data/ when it first starts)"
    _, checks = await _doctor(config, install / "server.js", capsys)
    assert checks["SillyTavern data"]["detail"].endswith("server.js is a file: the proxy "
                                                        "proxies without memory")  # fmt: skip


async def test_an_upstream_without_its_v1_is_pointed_out(
    tmp_path: Path, aiohttp_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # An OpenAI-compatible server that answers only under /v1, as most do.
    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    server = await aiohttp_server(app)
    root = str(server.make_url("")).rstrip("/")
    data, config, _ = setup(tmp_path, root)
    _, checks = await _doctor(config, data, capsys)
    detail = checks["upstream"]["detail"]
    assert checks["upstream"]["ok"] is True  # a Text Completion server may be right so
    assert f"404 at /models, but {root}/v1/models answers 200" in detail
    assert f"set [upstream] base_url (--upstream) to {root}/v1" in detail
    # With its /v1, or for a server that has no /v1 either, nothing more is said.
    data, config, _ = setup(tmp_path / "again", root + "/v1")
    _, checks = await _doctor(config, data, capsys)
    assert checks["upstream"]["detail"] == f"{root}/v1 answers (200)"
    data, config, _ = setup(tmp_path / "other", root + "/api")
    _, checks = await _doctor(config, data, capsys)
    assert checks["upstream"]["detail"] == f"{root}/api answers (404)"


def test_a_bad_config_says_the_key_and_the_text_output_marks_each_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[injection]\nposition = "top"\n', encoding="utf-8")
    code = main(["doctor", "--config", str(config), "--st-data", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert out.splitlines()[0].startswith("✗ config: ") and "injection.position" in out
    assert all(line[0] in "✓✗-" or line.startswith("    → ") for line in out.splitlines())


async def test_a_bad_key_leaves_the_other_checks_on_what_the_file_sets(
    tmp_path: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    # Not the defaults (127.0.0.1:5001, port 8765): the upstream and port the user set.
    data, config, port = setup(tmp_path, fake_llm.base_url)
    with config.open("a", encoding="utf-8") as extra:
        extra.write("[memory]\nrecap_tokens = 300\n")
    code, checks = await _doctor(config, data, capsys)
    assert code == 1 and checks["config"]["ok"] is False
    assert "memory.recap_tokens: unknown key" in checks["config"]["detail"]
    assert "the checks below use the rest of the file" in checks["config"]["detail"]
    assert checks["upstream"]["ok"] is True and fake_llm.base_url in checks["upstream"]["detail"]
    assert f":{port} is free" in checks["port"]["detail"]


def test_a_config_that_is_not_toml_leaves_the_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[server\nport = 1\n", encoding="utf-8")
    code = main(["doctor", "--config", str(config), "--st-data", str(tmp_path), "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 1
    assert "not valid TOML" in checks["config"]["detail"]
    assert "the checks below use the defaults" in checks["config"]["detail"]
    assert "127.0.0.1:5001" in checks["upstream"]["detail"]
    # What the command line gives still counts.
    down = f"http://127.0.0.1:{refused_port}/api/v1"
    argv = ["doctor", "--config", str(config), "--upstream", down, "--port", "8799", "--json"]
    assert main(argv) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert "the checks below use the defaults and the command line" in checks["config"]["detail"]
    assert f"{down} does not answer" in checks["upstream"]["detail"]
    assert "127.0.0.1:8799" in checks["port"]["detail"]


async def _doctor(
    config: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    # `main` runs its own event loop: off this test's loop, in a thread.
    return await asyncio.to_thread(doctor, config, data, capsys)


def test_a_running_proxy_with_an_access_key_is_seen_and_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:

    data, config, port = setup(tmp_path, f"http://127.0.0.1:{refused_port}/v1")
    with config.open("a", encoding="utf-8") as extra:
        extra.write('access_key = "a-long-random-access-key"\n')  # under [server]
    proc = launch(tmp_path, "proxy", "serve", "--config", str(config), "--st-data", str(data))
    try:
        wait_for_port(port, proc)
        code, checks = doctor(config, data, capsys)
    finally:
        stop(proc)
    assert (
        checks["port"]["ok"] is True and "recap-proxy 0.1.0 is running" in checks["port"]["detail"]
    )
    assert checks["requests in the last hour"]["ok"] is None  # none went through it yet
    assert checks["memory jobs"]["ok"] is True
    assert code == 1  # the upstream is down and ST points elsewhere


async def test_doctor_takes_serves_options_and_names_the_running_proxys_upstream(
    tmp_path: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:
    # The README's way: `serve --upstream URL`, the config (here) naming another API.
    down = f"http://127.0.0.1:{refused_port}/v1"
    data, config, port = setup(tmp_path, down)
    args = ("--config", str(config), "--st-data", str(data))
    proc = launch(tmp_path, "proxy", "serve", *args, "--upstream", fake_llm.base_url)
    try:
        await asyncio.to_thread(wait_for_port, port, proc)
        _, checks = await _doctor(config, data, capsys)
        upstream = checks["upstream"]
        assert upstream["ok"] is False and f"{down} does not answer" in upstream["detail"]
        assert (
            f"the running recap-proxy forwards to {fake_llm.base_url} instead" in upstream["detail"]
        )
        assert f"`doctor --upstream {fake_llm.base_url}` checks that one" in upstream["detail"]

        def with_upstream() -> dict[str, Any]:
            main(["doctor", *args, "--upstream", fake_llm.base_url, "--json"])
            found: dict[str, Any] = json.loads(capsys.readouterr().out)
            return found

        report = await asyncio.to_thread(with_upstream)
        # Likewise its data folder, which `serve --st-data` set: doctor named none.
        assert "running recap-proxy reads" not in checks["SillyTavern data"]["detail"]
        other = tmp_path / "other" / "data"
        Story(other, set()).grow(2)
        _, elsewhere = await _doctor(config, other, capsys)
    finally:
        stop(proc)
    [upstream] = [c for c in report["checks"] if c["name"] == "upstream"]
    assert upstream == {**upstream, "ok": True, "detail": f"{fake_llm.base_url} answers (200)"}
    assert elsewhere["SillyTavern data"]["detail"].endswith(
        f"; the running recap-proxy reads {data} (`doctor --st-data {data}` checks that one)"
    )


async def test_with_no_upstream_set_doctor_checks_the_one_the_running_proxy_uses(
    tmp_path: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    # The README's first command: `serve --upstream URL`, no upstream in any config.
    data, config, port = setup(tmp_path, "unused")
    config.write_text(
        config.read_text(encoding="utf-8").replace('[upstream]\nbase_url = "unused"\n', ""),
        encoding="utf-8",
    )
    args = ("--config", str(config), "--st-data", str(data))
    proc = launch(tmp_path, "proxy", "serve", *args, "--upstream", fake_llm.base_url)
    try:
        await asyncio.to_thread(wait_for_port, port, proc)
        _, checks = await _doctor(config, data, capsys)
    finally:
        stop(proc)
    upstream = checks["upstream"]
    assert upstream["ok"] is True
    assert upstream["detail"] == (
        f"{fake_llm.base_url} answers (200), the one the running recap-proxy forwards to "
        "(from its command line: a serve without --upstream would forward to "
        "http://127.0.0.1:5001/v1; [upstream] base_url in the config keeps it)"
    )


def test_a_store_set_inside_st_data_is_a_failed_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:
    data, config, _ = setup(tmp_path, f"http://127.0.0.1:{refused_port}/v1")
    inside = data / "default-user" / "recap.sqlite3"
    config.write_text(
        config.read_text(encoding="utf-8").replace(str(tmp_path / "s.sqlite3"), str(inside)),
        encoding="utf-8",
    )
    _, checks = doctor(config, data, capsys)
    assert checks["store"]["ok"] is False and "serve refuses to start" in checks["store"]["detail"]
    assert "[store] path" in checks["store"]["fix"] and not inside.exists()


def test_a_store_of_another_data_folder_is_a_failed_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:
    data, config, _ = setup(tmp_path, f"http://127.0.0.1:{refused_port}/v1")
    assert main(["chats", "--config", str(config), "--st-data", str(data)]) == 0
    capsys.readouterr()
    _, checks = doctor(config, data, capsys)
    assert checks["store"]["ok"] is True and f"mirrors {data}" in checks["store"]["detail"]
    # serve with another folder would mark every chat of the first one deleted.
    other = tmp_path / "other" / "data"
    Story(other, set()).grow(2)
    _, checks = doctor(config, other, capsys)
    assert checks["store"]["ok"] is False
    assert (
        f"mirrors SillyTavern's data folder {data}, but serve would read {other}"
        in (checks["store"]["detail"])
    )
    assert f"--st-data {data}" in checks["store"]["fix"]


def test_a_damaged_or_newer_store_is_a_failed_check_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:
    data, config, _ = setup(tmp_path, f"http://127.0.0.1:{refused_port}/v1")
    store = tmp_path / "s.sqlite3"
    store.write_bytes(b"not a store, " * 1000)
    _, checks = doctor(config, data, capsys)
    assert checks["store"]["ok"] is False
    assert checks["store"]["detail"] == f"{store} cannot be used: file is not a database"
    assert checks["store"]["fix"].startswith("restore it from a backup or move it aside")
    store.unlink()
    assert main(["chats", "--config", str(config), "--st-data", str(data)]) == 0
    capsys.readouterr()
    db = sqlite3.connect(store)
    db.execute("PRAGMA user_version=999")
    db.close()
    _, checks = doctor(config, data, capsys)
    assert "schema 999, newer than this recap-proxy's" in checks["store"]["detail"]
    assert checks["store"]["fix"] == "upgrade recap-proxy"


def test_a_store_disk_nearly_full_is_a_failed_check(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    refused_port: int,
) -> None:
    data, config, _ = setup(tmp_path, f"http://127.0.0.1:{refused_port}/v1")
    assert main(["chats", "--config", str(config), "--st-data", str(data)]) == 0
    capsys.readouterr()
    _, checks = doctor(config, data, capsys)
    assert checks["store"]["ok"] is True and "GB free on its disk)" in checks["store"]["detail"]
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        "proxy.doctor.checks.shutil.disk_usage", lambda _: usage._replace(free=40_000_000)
    )
    _, checks = doctor(config, data, capsys)
    assert checks["store"]["ok"] is False
    assert checks["store"]["detail"].startswith(f"only 40 MB free on the disk of {tmp_path}")


async def test_an_injection_template_that_carries_no_memory_is_pointed_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:
    data, config, _ = setup(tmp_path, f"http://127.0.0.1:{refused_port}/v1")
    _, checks = await _doctor(config, data, capsys)
    assert checks["injection template"]["ok"] is True
    with config.open("a", encoding="utf-8") as extra:
        extra.write('[injection]\ntemplate = "  "\n')
    _, checks = await _doctor(config, data, capsys)
    template = checks["injection template"]
    assert template["ok"] is False and "blank" in template["detail"]
    assert "{{running_recap}}" in template["fix"]
