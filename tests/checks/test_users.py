"""The runtime image under the users people run it as: an arbitrary `--user UID:GID`, and root with NB_UID
(the opt-in that takes the host user's UID and drops root before anything else runs)."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from builder.checks.smoke import TEST_LABEL

pytestmark = [pytest.mark.engine, pytest.mark.network, pytest.mark.usefixtures("default_image")]
UID = 4321
# What torch's caches and a user's code ask for: the user's name, a writable HOME, and torch.compile, whose
# Triton/Inductor caches live under HOME.
PROBE = ("import getpass, os, torch; f = torch.compile(lambda x: x * 2 + 1); "
         "print(os.getuid(), getpass.getuser(), os.environ['LOGNAME'], os.environ['HOME'], "
         "os.access(os.environ['HOME'], os.W_OK), f(torch.ones(2)).tolist(), "
         "os.path.isdir(os.environ['TORCHINDUCTOR_CACHE_DIR']), sep='|')")


def run(client: docker.DockerClient, image: str, command: list[str], **kwargs: object) -> tuple[int, str]:
    container = client.containers.run(image, command, detach=True, labels={TEST_LABEL: "users"}, **kwargs)
    try:
        code = int(container.wait(timeout=600)["StatusCode"])
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


def test_an_arbitrary_uid_has_a_name_a_home_and_torch_compile(client: docker.DockerClient, default_image: str) -> None:
    code, out = run(client, default_image, ["python", "-c", PROBE], user=f"{UID}:{UID}")
    assert code == 0, out
    uid, name, logname, home, writable, value, cache = out.strip().splitlines()[-1].split("|")
    assert (uid, name, logname) == (str(UID), f"uid{UID}", f"uid{UID}")
    assert home.startswith("/tmp/home-") and writable == "True" and value == "[3.0, 3.0]" and cache == "True", out


def test_root_with_nb_uid_runs_as_that_uid_and_gets_an_empty_workspace(client: docker.DockerClient,
                                                                       default_image: str, tmp_path: Path) -> None:
    folder = tmp_path / "missing"  # Docker makes it, root's
    code, out = run(client, default_image, ["sh", "-c", f"touch /workspace/x && python -c \"{PROBE}\""],
                    user="root", environment={"NB_UID": str(UID), "NB_GID": str(UID)},
                    volumes={str(folder): {"bind": "/workspace", "mode": "rw"}})
    assert code == 0, out
    uid, name, _, home, writable, value, _ = out.strip().splitlines()[-1].split("|")
    assert (uid, name, home, writable, value) == (str(UID), "user", "/home/user", "True", "[3.0, 3.0]"), out
    assert (folder / "x").stat().st_uid == UID and folder.stat().st_uid == UID


@pytest.mark.parametrize(("env", "said"), [({"NB_UID": "me"}, "must be numbers"),
                                           ({"NB_UID": "0"}, "add `-e JUPYTER_ALLOW_ROOT=1`")])
def test_a_bad_nb_uid_is_one_line_and_exit_2(client: docker.DockerClient, default_image: str, env: dict[str, str],
                                             said: str) -> None:
    """(tests/checks/test_jupyter_root.py pastes what these lines suggest.)"""
    code, out = run(client, default_image, ["id", "-u"], user="root", environment=env)
    assert code == 2 and said in out and len(out.strip().splitlines()) == 1, out


def test_nb_uid_0_keeps_root_when_asked_by_name(client: docker.DockerClient, default_image: str) -> None:
    code, out = run(client, default_image, ["id", "-u"], user="root",
                    environment={"NB_UID": "0", "JUPYTER_ALLOW_ROOT": "1"})
    assert (code, out.strip().splitlines()[-1]) == (0, "0"), out
