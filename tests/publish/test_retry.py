"""Which push failures are retried: read from the engine's push stream, without an engine or a registry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from builder.publish.push import PushError, push_ref

DIGEST_WITH_503 = "sha256:" + "0" * 20 + "503" + "f" * 41


class FakeAPI:
    """docker-py's APIClient.push as far as push_ref uses it: a stream of decoded chunks per attempt."""

    def __init__(self, attempts: list[list[dict[str, Any]]]) -> None:
        self.attempts, self.calls = attempts, 0

    def push(self, repository: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.calls += 1
        return iter(self.attempts[min(self.calls, len(self.attempts)) - 1])


class FakeClient:
    def __init__(self, attempts: list[list[dict[str, Any]]]) -> None:
        self.api = FakeAPI(attempts)


def push(attempts: list[list[dict[str, Any]]]) -> tuple[str | PushError, int, list[float]]:
    client, waits = FakeClient(attempts), []
    try:
        result: str | PushError = push_ref(client, "registry.local/x:1", None, lambda _: None,  # type: ignore[arg-type]
                                           sleep=waits.append)
    except PushError as exc:
        result = exc
    return result, client.api.calls, waits


def test_a_503_from_the_registry_is_retried_until_it_answers() -> None:
    ok = [{"aux": {"Digest": DIGEST_WITH_503}}]
    result, calls, waits = push([[{"error": "received unexpected HTTP status: 503 Service Unavailable"}], ok])
    assert (result, calls, waits) == (DIGEST_WITH_503, 2, [1.0])


def test_digits_inside_a_digest_are_not_a_server_error() -> None:
    """A failure that names a blob whose digest holds '503' is not an HTTP 503: it fails at once."""
    result, calls, waits = push([[{"error": f"blob unknown to registry: {DIGEST_WITH_503}"}]])
    assert isinstance(result, PushError) and calls == 1 and waits == []
    assert "not retried" in str(result)


@pytest.mark.parametrize("message", ["unauthorized: authentication required", "denied: requested access"])
def test_an_auth_failure_is_never_retried(message: str) -> None:
    result, calls, _ = push([[{"error": message}]])
    assert isinstance(result, PushError) and calls == 1 and "authentication failed" in str(result)
