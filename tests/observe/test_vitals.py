"""The proxy's own account of its health: the upstream's run of failures, the verdict."""

from __future__ import annotations

from proxy.observe.vitals import FAILING_AFTER, Health, Vitals


def test_failures_in_a_row_make_it_degraded_and_an_answer_mends_it() -> None:
    now = [100.0]
    vitals = Vitals(clock=lambda: now[0], wall=lambda: 1_800_000_000.0)
    healthy = Health("ok", "running", {"queued": 0, "running": 0, "failed": 0}, vitals)
    assert healthy.to_json()["status"] == "ok"
    for _ in range(FAILING_AFTER - 1):
        vitals.failed("cannot reach http://127.0.0.1:5001/v1")
        vitals.answered(502)  # the upstream's own gateway error counts too
    assert vitals.upstream.failures_in_a_row == 2 * (FAILING_AFTER - 1)
    assert Health("ok", "running", {}, vitals).to_json()["status"] == "degraded"
    vitals.answered(404)  # a 4xx: the upstream works
    assert not vitals.upstream_failing and vitals.upstream.last_error == "HTTP 502"
    now[0] = 160.0
    report = Health("ok", "running", {}, vitals).to_json()
    upstream = report["upstream"]
    assert isinstance(upstream, dict)
    assert report["uptime_s"] == 60.0 and upstream["last_status"] == 404
    assert upstream["last_error_at"] == 1_800_000_000.0


def test_each_part_names_its_problem() -> None:
    vitals = Vitals()
    assert Health("none", "off", {}, vitals).problems == []  # no data folder: nothing to keep
    broken = Health("OperationalError: disk I/O error", "stopped", {}, vitals)
    assert broken.problems == [
        "store: OperationalError: disk I/O error",
        "the watch on SillyTavern's data folder stopped",
    ]
    assert broken.to_json()["status"] == "degraded"
    gone = Health("ok", "missing", {}, vitals)
    assert gone.problems == [
        "SillyTavern's data folder is missing (not there yet, or gone): its chats are not "
        "followed until it is there"
    ]


def test_chat_requests_are_counted_for_the_last_hour_in_at_most_an_hour_of_minutes() -> None:
    now = [36_000.0]
    vitals = Vitals(clock=lambda: now[0])
    for second in range(0, 2 * 3600, 2):  # two hours of a request every 2 s
        now[0] = 36_000.0 + second
        vitals.saw("identified" if second % 10 else "unidentified")
    counts = vitals.recent_requests()
    assert counts == {"identified": 1440, "unidentified": 360}  # the last 60 minutes
    assert len(vitals._minutes) <= 61  # not one entry per request
    now[0] += 3600  # an hour with none
    assert vitals.recent_requests() == {"identified": 0, "unidentified": 0}
