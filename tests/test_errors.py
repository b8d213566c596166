"""The error tree: each error knows its status and its one JSON body."""

from __future__ import annotations

import pytest

from proxy.errors import (
    AdapterError,
    Conflict,
    JobFailure,
    NoCredentials,
    NotFound,
    RecapProxyError,
    Refused,
    RequestError,
    Unauthorized,
    Unavailable,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (AdapterError("not JSON"), 400, "bad_request"),
        (RequestError("swipe must be a number"), 400, "bad_request"),
        (NotFound("no chat 'x'"), 404, "not_found"),
        (Conflict("nothing to edit"), 409, "conflict"),
        (Unavailable("no data folder", code="no_data_folder"), 503, "no_data_folder"),
        (RecapProxyError("a bug"), 500, "internal_error"),
    ],
)
def test_status_and_body(error: RecapProxyError, status: int, kind: str) -> None:
    assert error.status == status
    assert error.to_json() == {"error": {"message": str(error), "type": kind, "code": kind}}


def test_upstream_errors_say_what_failed_and_their_code() -> None:
    timeout = UpstreamTimeout("no answer", code="upstream_timeout")
    broken = UpstreamUnreachable("reset", code="upstream_broken")
    assert (timeout.status, broken.status) == (504, 502)
    assert timeout.to_json()["error"] == {
        "message": "no answer",
        "type": "upstream_timeout",
        "code": "upstream_timeout",
    }
    assert broken.to_json()["error"]["type"] == "upstream_unreachable"
    assert broken.to_json()["error"]["code"] == "upstream_broken"
    assert isinstance(timeout, UpstreamError)


def test_job_failures_say_whether_a_retry_can_help() -> None:
    assert JobFailure("429").retry and NoCredentials("no model yet").retry
    assert not Refused("400").retry and not Unauthorized("401").retry
    assert isinstance(Unauthorized("401"), Refused)
