"""The image itself, through pytest-testinfra's docker backend (`--hosts docker://CONTAINER`).

The container runs as the image's default user; IMGBUILD_LABELS holds the image's labels as JSON.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

LABELS: dict[str, str] = json.loads(os.environ.get("IMGBUILD_LABELS", "{}"))
REQUIRED_LABELS = ("org.opencontainers.image.title", "org.opencontainers.image.version",
                   "org.opencontainers.image.created", "io.imgbuild.variant", "io.imgbuild.torch",
                   "io.imgbuild.torch.cuda", "io.imgbuild.cudnn", "io.imgbuild.nccl", "io.imgbuild.python",
                   "io.imgbuild.flavor", "io.imgbuild.inputs")

# A wheel that claims to be torch 2.6.0, made inside the container: `pip install` of it must be refused by
# the image's constraints, with no index or network involved.
FAKE_TORCH = """
import base64, hashlib, pathlib, zipfile
d = pathlib.Path('/tmp/fake-torch'); d.mkdir(exist_ok=True)
files = {'torch_fake/__init__.py': b'',
         'torch-2.6.0.dist-info/METADATA': b'Metadata-Version: 2.1\\nName: torch\\nVersion: 2.6.0\\n',
         'torch-2.6.0.dist-info/WHEEL': b'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}
record = ''.join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(c).digest()).rstrip(b'=').decode()},{len(c)}\\n"
                 for n, c in files.items()) + 'torch-2.6.0.dist-info/RECORD,,\\n'
with zipfile.ZipFile(d / 'torch-2.6.0-py3-none-any.whl', 'w') as z:
    for n, c in files.items():
        z.writestr(n, c)
    z.writestr('torch-2.6.0.dist-info/RECORD', record)
"""


def test_no_build_time_leftovers_anywhere(host: Any) -> None:
    # First in this file: later checks write to /tmp in the same container. As root: the default user
    # cannot list /root (0700), which is how uv's interpreter cache in /root/.cache/uv (a file time and the
    # build host's CPU flags) went unnoticed. Every search checks its own exit code: with its errors thrown
    # away, a search that could not run printed nothing, which read as "nothing found".
    found = _as_root(host).run("for d in /root/.cache /home/user/.cache /tmp /var/tmp; do "
                               "if [ -e \"$d\" ]; then find \"$d\" -mindepth 1 -maxdepth 2 -print; fi; done")
    assert found.rc == 0, f"the search itself failed (exit {found.rc}): {found.stderr.strip()[:300]}"
    assert found.stdout.strip() == "", f"a build left files in the image: {found.stdout.strip()[:300]}"


def _as_root(host: Any) -> Any:
    """The same container as root: a search as the default user cannot read /root or apt's partial/ (0700),
    and a search that cannot read a folder proves nothing about it."""
    import testinfra  # type: ignore[import-untyped]  # ships no type information

    return testinfra.get_host(f"docker://root@{host.backend.name}")


def test_default_user_is_not_root(host: Any) -> None:
    uid = int(host.check_output("id -u"))
    assert uid != 0, "the image's default user is root (uid 0); it must run as a non-root user"


def test_workspace_is_writable_by_the_default_user(host: Any) -> None:
    assert host.check_output("pwd") == "/workspace", "the working directory is not /workspace"
    result = host.run("touch /workspace/.imgbuild-probe && rm /workspace/.imgbuild-probe")
    assert result.rc == 0, f"/workspace is not writable by the default user: {result.stderr.strip()}"


def test_venv_python_comes_first_in_path(host: Any) -> None:
    assert host.check_output("command -v python") == "/opt/venv/bin/python"
    assert host.check_output("command -v pip") == "/opt/venv/bin/pip"


def test_installed_packages_are_consistent(host: Any) -> None:
    result = host.run("pip check")
    assert result.rc == 0, f"pip check: {result.stdout.strip()}"


def test_pip_install_cannot_replace_torch(host: Any) -> None:
    assert host.check_output("printenv PIP_CONSTRAINT") == "/etc/pip/constraints.txt"
    constraints = host.file("/etc/pip/constraints.txt").content_string
    assert f"torch=={LABELS.get('io.imgbuild.torch')}\n" in constraints, "the constraints do not hold torch"
    script = base64.b64encode(FAKE_TORCH.encode()).decode()
    host.run_expect([0], f"echo {script} | base64 -d | python")
    result = host.run("pip install --no-index --find-links /tmp/fake-torch torch==2.6.0")
    assert result.rc != 0, "pip replaced torch despite the constraints"
    assert "constraint" in (result.stdout + result.stderr), result.stderr
    version = host.check_output("python -c 'import torch; print(torch.__version__)'")
    assert version.split("+")[0] == LABELS.get("io.imgbuild.torch")


def test_no_pip_cache_ca_bundle_or_apt_lists(host: Any) -> None:
    for cache in ("/root/.cache/pip", "/home/user/.cache/pip"):
        assert not host.file(cache).exists, f"{cache} was left in the image"
    root = _as_root(host)
    found = root.run("find / -xdev \\( -name ca-bundle.pem -o -path /tmp/imgbuild \\) -print")
    assert found.rc == 0, f"the search itself failed (exit {found.rc}): {found.stderr.strip()[:300]}"
    assert found.stdout.strip() == "", f"a build CA bundle was left: {found.stdout.strip()}"
    lists = root.run("find /var/lib/apt/lists -type f ! -name lock -print")
    assert lists.rc == 0, f"the search itself failed (exit {lists.rc}): {lists.stderr.strip()[:300]}"
    assert lists.stdout.strip() == "", f"apt lists were left: {lists.stdout.strip()[:200]}"


def test_labels_are_present() -> None:
    missing = [label for label in REQUIRED_LABELS if not LABELS.get(label)]
    assert not missing, f"labels missing: {', '.join(missing)}"
