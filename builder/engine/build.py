"""The builder behind one small interface: what turns a context tar into an image ID. The stages call
`Builder.build` and nothing else of it, so another builder (BuildKit through buildx, another engine) joins
here without touching them.

The classic builder, driven by the low-level `APIClient.build`: errors arrive inside the stream, so a failed
build is detected there, gets no tag, and leaves no container; an interrupted one cleans up the same way.
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import docker
import docker.errors

from ..progress import Reporter
from . import client as engine

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_RUNNING = re.compile(r"Running in ([0-9a-f]{12,64})")
_LAYER = re.compile(r"^ ---> ([0-9a-f]{12,64})$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The engine's message repeats the whole RUN command; the step line already shows it.
_COMMAND = re.compile(r"^The command '.*' returned", re.S)
TAIL_LINES = 15


class BuildFailed(Exception):
    def __init__(self, step: str, tail: list[str], log: Path, reason: str) -> None:
        super().__init__(reason)
        self.step, self.tail, self.log, self.reason = step, tail, log, reason


class Interrupted(KeyboardInterrupt):
    """Ctrl-C reached the builds: `builds` of them were cancelled and their containers removed."""

    def __init__(self, builds: int) -> None:
        super().__init__(builds)
        self.builds = builds


class Builder(Protocol):
    def build(self, name: str, tar: bytes, buildargs: dict[str, str], labels: dict[str, str], no_cache: bool,
              log_path: Path, rep: Reporter) -> str:
        """Build the context `tar` (its Dockerfile at the root) with the host's network; return the image ID.
        Applies no tag. Raises BuildFailed, having removed whatever the build left running."""
        ...

    def cancel(self) -> int:
        """From another thread (Ctrl-C with `--jobs`): stop every build in flight; returns how many."""
        ...


@dataclass
class _Run:
    """What one build created, so it can be removed if the build fails or is interrupted."""

    before: set[str] = field(default_factory=set)
    containers: list[str] = field(default_factory=list)
    layers: set[str] = field(default_factory=set)


class _Cancelled(Exception):
    """Raised in a build's own thread once `cancel` was called."""


class ClassicBuilder:
    """The engine's classic builder through the Docker SDK (docker-py cannot drive BuildKit)."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._runs: list[_Run] = []

    def build(self, name: str, tar: bytes, buildargs: dict[str, str], labels: dict[str, str], no_cache: bool,
              log_path: Path, rep: Reporter) -> str:
        run = _Run(before={c.id for c in engine.containers(self.client)})
        with self._lock:
            if self._cancelled.is_set():
                raise Interrupted(0)
            self._runs.append(run)
        try:
            return stream_build(self.client, name, tar, buildargs, labels, no_cache, log_path, rep, run,
                                self._cancelled)
        finally:
            with self._lock:
                self._runs.remove(run)

    def cancel(self) -> int:
        """A build's thread blocks reading the engine's stream, silent while a step runs: removing the step's
        container ends the step, and the thread then sees the flag at the next chunk and cleans up."""
        with self._lock:
            self._cancelled.set()
            runs = list(self._runs)
        if runs:
            fresh = engine.connect(timeout=60)
            for run in runs:
                engine.remove_containers(fresh, list(run.containers))
        return len(runs)


def stream_build(client: docker.DockerClient, name: str, tar: bytes, buildargs: dict[str, str],
                 labels: dict[str, str], no_cache: bool, log_path: Path, rep: Reporter, run: _Run,
                 cancelled: threading.Event) -> str:
    """Run one build, following its stream; returns the image ID. Applies no tag: the caller tags only
    after success, so a failure never leaves a half-tagged image."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    step, image_id, error = "", None, None
    began, starts = time.monotonic(), []

    def take(line: str) -> None:
        nonlocal step
        line = _ANSI.sub("", line).rstrip("\r")
        tail.append(line)
        if m := _STEP.match(line):
            step = line
            starts.append(f"{m.group(1)}={time.monotonic() - began:.1f}")
            rep.step(name, int(m.group(1)), int(m.group(2)), m.group(3))
        elif m := _RUNNING.search(line):
            run.containers.append(m.group(1))
        elif m := _LAYER.match(line):
            run.layers.add(m.group(1))

    with log_path.open("w", encoding="utf-8") as log:
        pending = ""  # a step's output arrives in pieces that need not end at a line's end (uv's colour codes)
        try:
            # The host's network: the RUN steps fetch from the wheel cache served on its loopback.
            stream = client.api.build(fileobj=io.BytesIO(tar), custom_context=True, buildargs=buildargs,
                                      labels=labels, rm=True, forcerm=True, nocache=no_cache, pull=False,
                                      decode=True, network_mode="host")
            for chunk in stream:
                if cancelled.is_set():
                    raise _Cancelled
                if "stream" in chunk:
                    text = str(chunk["stream"])
                    log.write(text)
                    *lines, pending = (pending + text).split("\n")
                    for line in lines:
                        take(line)
                elif "error" in chunk:
                    error = _COMMAND.sub("the step's command returned", str(chunk["error"]).strip())
                    log.write(f"ERROR: {error}\n")
                elif "aux" in chunk and isinstance(chunk["aux"], dict):
                    image_id = chunk["aux"].get("ID", image_id)
            if pending:
                take(pending)
            starts.append(f"end={time.monotonic() - began:.1f}")
        except (KeyboardInterrupt, _Cancelled):
            log.write("INTERRUPTED\n")
            client.close()  # drops the connection, which makes the engine cancel the build
            cleanup(run)
            raise Interrupted(1) from None
        except docker.errors.APIError as exc:
            error = str(exc.explanation or exc)
            log.write(f"ERROR: {error}\n")
        # When each step began (seconds into the build): what `make bench` splits a build's time by.
        log.write(f"imgbuild step starts: {' '.join(starts)}\n")
    if cancelled.is_set():  # the step failed because cancel() removed its container
        cleanup(run)
        raise Interrupted(1)
    if error or image_id is None:
        cleanup(run)
        raise BuildFailed(step, list(tail), log_path, error or "the build stream ended without an image ID")
    return str(image_id)


def cleanup(run: _Run, wait_s: float = 20.0) -> int:
    """Remove the containers a build left: the ones it named, and any new one made from its layers (the
    engine may start a step's container before its name reaches us, or just after we cancelled). Uses a
    fresh client, since the build's may have been closed to cancel it."""
    client = engine.connect(timeout=60)
    named = {cid[:12] for cid in run.containers}
    layers = {layer[:12] for layer in run.layers}

    def ours(container: engine.Listed) -> bool:
        image = container.image_id.removeprefix("sha256:")
        return container.id not in run.before and (container.id[:12] in named or image[:12] in layers)

    removed, quiet_rounds = 0, 0
    deadline = time.monotonic() + wait_s
    while quiet_rounds < 3 and time.monotonic() < deadline:
        strays = [c.id for c in engine.containers(client) if ours(c)]
        removed += engine.remove_containers(client, strays)
        quiet_rounds = 0 if strays else quiet_rounds + 1
        time.sleep(0.5)
    return removed
