"""The test bed's two Docker 28.5 engines (tests/engines.py), started once for this package's tests that use
them (test_engines, test_same_bytes) and removed after its last test. Starting them for each module cost CI
two more engine starts, and a base and a builder cache built again on each (minutes on this 2-CPU machine)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

import pytest

from builder.engine import client as engine

from ..engines import STORES, InnerEngine, engine_image, inner_engine


def host_network() -> tuple[str, str, str]:
    """What an inner engine must leave as it found it: docker0's address, the links, the nat table."""
    def out(*command: str) -> str:
        return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False).stdout

    return (out("ip", "-4", "-br", "addr", "show", "docker0"), out("ip", "-br", "link"),
            out("iptables", "-t", "nat", "-S"))


@pytest.fixture(scope="package")
def inner_engines() -> Iterator[dict[str, InnerEngine]]:
    """Docker 28.5 with each image store, by store name, both answering until the package's tests end."""
    host = engine.connect()
    before = host_network()
    with contextlib.ExitStack() as stack:
        yield {store: stack.enter_context(inner_engine(host, store)) for store in sorted(STORES)}
    assert host_network() == before, "the inner engines changed the host's network"
    # The host engine still starts a container on its default bridge network.
    host.containers.run(engine_image(host), ["true"], remove=True)
    host.close()
