"""Which push failures are retried: read from skopeo's error line, without an engine or a registry (the real
registry's failures are in test_push)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builder.pipeline import push as push_module
from builder.pipeline.push import PushError, push_ref
from builder.registry.skopeo import RegistryError

DIGEST_WITH_503 = "sha256:" + "0" * 20 + "503" + "f" * 41


def push(monkeypatch: pytest.MonkeyPatch, errors: list[str | None]) -> tuple[PushError | None, int, list[float]]:
    """push_ref where skopeo fails with each of `errors` in turn (None: that attempt succeeds)."""
    calls, waits = [], []

    def publish_layout(*args: Any) -> None:
        calls.append(args)
        error = errors[min(len(calls), len(errors)) - 1]
        if error is not None:
            raise RegistryError(error)

    monkeypatch.setattr(push_module.registry, "publish_layout", publish_layout)
    try:
        push_ref(Path("/nonexistent"), "registry.local/x:1", None, lambda _: None, sleep=waits.append)
    except PushError as exc:
        return exc, len(calls), waits
    return None, len(calls), waits


def test_a_503_from_the_registry_is_retried_until_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    error = "writing blob: received unexpected HTTP status: 503 Service Unavailable"
    assert push(monkeypatch, [error, None]) == (None, 2, [1.0])


def test_a_refused_connection_is_retried_four_times_in_all(monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls, waits = push(monkeypatch, ["dial tcp 127.0.0.1:5000: connect: connection refused"])
    assert calls == 4 and waits == [1.0, 2.0, 4.0]
    assert result is not None and "after 4 attempts" in str(result)


def test_digits_inside_a_digest_are_not_a_server_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure that names a blob whose digest holds '503' is not an HTTP 503: it fails at once."""
    result, calls, waits = push(monkeypatch, [f"blob unknown to registry: {DIGEST_WITH_503}"])
    assert result is not None and calls == 1 and waits == []
    assert "not retried" in str(result)


@pytest.mark.parametrize("message", ["unauthorized: authentication required", "denied: requested access"])
def test_an_auth_failure_is_never_retried(monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    result, calls, _ = push(monkeypatch, [message])
    assert result is not None and calls == 1 and "authentication failed" in str(result)


def test_a_port_that_holds_401_is_no_authentication_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """skopeo names the registry's port: on 127.0.0.1:44013 a read-only registry's 405 was once read as a 401
    (CI, issue 36). A status is a whole number, never digits inside a port, a digest or an ID."""
    message = ("writing blob: initiating layer upload to /v2/x/blobs/uploads/ in 127.0.0.1:44013: StatusCode: 405, "
               "Method not allowed")
    result, calls, _ = push(monkeypatch, [message])
    assert result is not None and calls == 1
    assert "authentication failed" not in str(result)
    assert str(result).endswith("the registry refuses writes (HTTP 405: read-only, or a pull-through mirror)")
    retried, calls, _ = push(monkeypatch, ["received unexpected HTTP status: 502 Bad Gateway from 127.0.0.1:45020"])
    assert retried is not None and calls == 4, "a real 502 is still retried"
    _, calls, _ = push(monkeypatch, ["manifest invalid at 127.0.0.1:5003"])
    assert calls == 1, "port 5003 is not an HTTP 503"
