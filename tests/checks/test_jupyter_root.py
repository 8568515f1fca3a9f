"""Every way into JupyterLab that the jupyter image's scripts refuse says what to run instead, and what it says
works when pasted into the host's shell: each suggested `docker run` option is taken from the message,
expanded by the shell of this (root) host user as a person's paste would be, run with the docker CLI, and
followed until JupyterLab serves. "Serves" means the token is asked for and a notebook saved through
Jupyter's API lands in the host folder, owned by whom the run says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from builder.checks.smoke import TEST_LABEL, wait_for_status

pytestmark = [pytest.mark.engine, pytest.mark.network]
TOKEN = "imgbuild-test-" + os.urandom(8).hex()
OTHER_UID = 4321
STEPS = 6  # runs at most, refused ones and serving ones, from one start


@dataclass
class Run:
    """One `docker run` of the jupyter image: its --user and its -e options (the rest is fixed)."""

    user: str | None = None
    env: dict[str, str] = field(default_factory=lambda: {"JUPYTER_TOKEN": TOKEN})

    def args(self) -> list[str]:
        return ([*(["--user", self.user] if self.user else [])]
                + [arg for k, v in self.env.items() for arg in ("-e", f"{k}={v}")])

    def taking(self, suggestion: str) -> Run:
        """The run with a suggestion pasted in, as the host's shell expands it. `--user ...` replaces how the
        container starts (the user and the NB_*/JUPYTER_ALLOW_ROOT options); `-e X=Y` is added."""
        words = subprocess.run(["sh", "-c", f"for w in {suggestion}; do printf '%s\\n' \"$w\"; done"],
                               capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()
        user, env = self.user, dict(self.env)
        if words[0] == "--user":
            env = {k: v for k, v in env.items() if k not in ("NB_UID", "NB_GID", "JUPYTER_ALLOW_ROOT")}
        pairs = iter(words)
        for flag in pairs:
            value = next(pairs)
            if flag == "--user":
                user = value
            else:
                assert flag == "-e", suggestion
                key, _, val = value.partition("=")
                env[key] = val
        return Run(user, env)


@pytest.fixture
def docker_run(jupyter_image: str) -> Iterator[Any]:
    started: list[str] = []

    def start(folder: Path, run: Run) -> tuple[str, str]:
        """The container's ID and its published port."""
        cid = subprocess.run(["docker", "run", "-d", "--label", f"{TEST_LABEL}=jupyter-root", "-p",
                              "127.0.0.1::8888", "-v", f"{folder}:/workspace", *run.args(), jupyter_image],
                             capture_output=True, text=True, check=True, timeout=120).stdout.strip()
        started.append(cid)
        port = subprocess.run(["docker", "port", cid, "8888/tcp"], capture_output=True, text=True, check=False,
                              timeout=30).stdout.strip().rsplit(":", 1)[-1]
        return cid, port

    yield start
    if started:
        subprocess.run(["docker", "rm", "-f", *started], capture_output=True, check=False, timeout=120)


def _outcome(cid: str, port: str) -> tuple[bool, str]:
    """(whether JupyterLab serves, the container's log): it serves once /api answers; the scripts refuse at
    once, so a container that stops within two minutes was refused."""
    for _ in range(240):
        running = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", cid], capture_output=True,
                                 text=True, check=True, timeout=30).stdout.strip() == "true"
        if not running or wait_for_status(f"http://127.0.0.1:{port}/api", 200, 0) == 200:
            break
        time.sleep(0.5)
    logs = subprocess.run(["docker", "logs", cid], capture_output=True, text=True, check=True, timeout=30)
    return running, logs.stdout + logs.stderr


def _save(port: str, token: str, name: str) -> int:
    body = json.dumps({"type": "notebook", "format": "json", "content": {
        "cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/contents/{name}", data=body, method="PUT",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def follow(docker_run: Any, folder: Path, run: Run) -> tuple[list[Run], list[str]]:
    """Start `run`; each time the scripts refuse a run, paste in every command the message offers (each is
    said to work for someone; this host user is root, as the message's reader may be) and start those. Every
    path must end with JupyterLab serving: asking for the token and saving a notebook into the host folder.
    Returns the runs that served, in the order met, and the messages on the way."""
    messages: list[str] = []
    served: list[Run] = []
    queue = [run]
    for _ in range(STEPS):
        if not queue:
            break
        one = queue.pop(0)
        cid, port = docker_run(folder, one)
        serves, logs = _outcome(cid, port)
        if serves:
            token = one.env["JUPYTER_TOKEN"]
            with pytest.raises(urllib.error.HTTPError) as refused:
                _save(port, "wrong-" + token, "x.ipynb")
            assert refused.value.code == 403
            name = f"saved-{len(served)}.ipynb"
            assert _save(port, token, name) == 201, one.args()
            assert (folder / name).is_file(), f"{one.args()}: the saved notebook is not in the host folder"
            served.append(one)
            continue
        said = [line for line in logs.splitlines() if line.startswith(("start-jupyter:", "imgbuild-entrypoint:"))]
        assert len(said) == 1, f"{one.args()}: stopped without one line saying why: {logs[-1500:]}"
        messages.append(said[0])
        suggestions = re.findall(r"`([^`]+)`", said[0])
        assert suggestions, f"no command to paste in: {said[0]}"
        queue += [one.taking(s) for s in suggestions if not s.startswith("-v ")]
    assert served and not queue, f"still refused after {STEPS} runs: {messages}"
    return served, messages


def _root_owned(tmp_path: Path, with_notebook: bool) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    folder.chmod(0o755)
    if with_notebook:
        (folder / "mine.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    return folder


def _owners(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_uid for p in folder.iterdir()}


@pytest.mark.parametrize("case", ["docker-made", "empty", "with-notebooks"])
def test_a_root_host_user_gets_a_working_command_from_the_plain_one(docker_run: Any, tmp_path: Path,
                                                                    case: str) -> None:
    """The seed's command, as root on the host, on the three folders a root user has: it refuses once with
    the fix, the fix runs JupyterLab (as root, asked for by name), and nothing of the user's changes owner."""
    if os.geteuid() != 0:
        pytest.fail("these cases are a root host user's: run the suite as root (CI does)")
    folder = tmp_path / "code" if case == "docker-made" else _root_owned(tmp_path, case == "with-notebooks")
    served, messages = follow(docker_run, folder, Run())
    assert messages[0].startswith("start-jupyter: /workspace is not writable by uid 1000 (it is uid 0's"), messages
    assert (served[0].user, served[0].env.get("JUPYTER_ALLOW_ROOT")) == ("root", "1"), served
    owners = _owners(folder)
    assert all(uid == 0 for uid in owners.values()), owners
    assert folder.stat().st_uid == 0 and (case != "with-notebooks" or "mine.ipynb" in owners)


@pytest.mark.parametrize(("name", "run"), [
    ("nb-uid-0", Run("root", {"JUPYTER_TOKEN": TOKEN, "NB_UID": "0", "NB_GID": "0"})),  # the old advice, as root
    ("user-0-0", Run("0:0")),  # the other old advice, as root
    ("root-plain", Run("root")),
    ("nb-uid-not-a-number", Run("root", {"JUPYTER_TOKEN": TOKEN, "NB_UID": "me"})),
    ("empty-token", Run(None, {"JUPYTER_TOKEN": ""})),
])
def test_every_refusal_offers_a_command_that_works_when_pasted(docker_run: Any, tmp_path: Path, name: str,
                                                               run: Run) -> None:
    folder = tmp_path / "code"
    folder.mkdir()
    if name == "empty-token":
        os.chown(folder, 1000, 100)
    served, messages = follow(docker_run, folder, run)
    assert messages, f"{name}: was not refused"
    if name == "empty-token":
        assert re.fullmatch(r"[0-9a-f]{48}", served[0].env["JUPYTER_TOKEN"]), served
        assert all(p.stat().st_uid == 1000 for p in folder.iterdir())


def test_a_folder_of_another_user_is_taken_by_its_uid(docker_run: Any, tmp_path: Path) -> None:
    folder = tmp_path / "code"
    folder.mkdir()
    os.chown(folder, OTHER_UID, OTHER_UID)
    served, messages = follow(docker_run, folder, Run())
    assert messages == [f"start-jupyter: /workspace is not writable by uid 1000 (it is uid {OTHER_UID}'s, mode 755; "
                        f"Docker makes a host folder that did not exist root's): start with `--user root -e "
                        f"NB_UID={OTHER_UID} -e NB_GID={OTHER_UID}` (JupyterLab then runs as the folder's owner)"]
    assert [(one.user, one.env.get("NB_UID")) for one in served] == [("root", str(OTHER_UID))]
    assert {p.stat().st_uid for p in folder.iterdir()} == {OTHER_UID}
