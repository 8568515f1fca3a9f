"""`imgbuild test`: run the smoke suite inside a container of each image, check the image itself with
pytest-testinfra, and report every check as PASS, FAIL or SKIP with its reason (text, JSON, JUnit XML).

Expected versions come from the image's labels. Every container is removed afterwards, on failure and on
Ctrl-C too.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smoke_tests.results import RESULTS_MARKER, Result, summary

from ..engine import client as engine
from ..engine.client import DeviceRequest
from ..engine.prune import RUN, TEST_LABEL
from ..errors import UserError
from . import records

SUITE_TIMEOUT_S = 1200
SHM = "2g"  # NCCL's shared-memory transport and DataLoader workers fail with Docker's 64 MB default
IMAGE_CHECKS = Path(__file__).parent / "image_checks" / "test_image.py"


@dataclass(frozen=True)
class ImageReport:
    image: str
    results: tuple[Result, ...]

    @property
    def failed(self) -> bool:
        return any(r.status == "FAIL" for r in self.results)


def expectations(labels: dict[str, str]) -> dict[str, Any]:
    """What the image claims, in the suite's terms, from its labels."""
    keys = {"torch": "io.imgbuild.torch", "torch_cuda": "io.imgbuild.torch.cuda", "cudnn": "io.imgbuild.cudnn",
            "nccl": "io.imgbuild.nccl", "python": "io.imgbuild.python", "name": "io.imgbuild.variant"}
    expect: dict[str, Any] = {k: labels[v] for k, v in keys.items() if labels.get(v)}
    devel = {"cuda_toolkit": "io.imgbuild.cuda.toolkit", "toolkit_source": "io.imgbuild.cuda.toolkit.source",
             "nvcc": "io.imgbuild.cuda.nvcc"}
    expect.update({k: labels[v] for k, v in devel.items() if labels.get(v)})
    if labels.get("io.imgbuild.archs"):
        expect["archs"] = labels["io.imgbuild.archs"].split(",")
    return expect


def gpu_request(client: engine.Client, image: str, gpus: str) -> tuple[list[DeviceRequest], str]:
    """The device request for the suite's container, and the report's first line. `auto` asks for all GPUs
    when a real `--gpus` request succeeds (a registered runtime is not proof: CDI set-ups differ)."""
    if gpus == "none":
        return [], "CPU-only (--gpus none): GPU checks skipped"
    count = -1 if gpus in ("auto", "all") else int(gpus)
    request = [DeviceRequest(count=count, capabilities=[["gpu"]])]
    probe = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
    # Created and removed by hand: `run(remove=True)` leaves the container behind when the GPU request
    # fails at start, which is exactly the case probed here.
    container = client.containers.create(image, probe, device_requests=request, entrypoint=[],
                                         labels={TEST_LABEL: RUN})
    try:
        container.start()
        container.wait(timeout=120)
        out = container.logs(stdout=True, stderr=False)
    except engine.DockerException as exc:
        if gpus != "auto":
            raise UserError(f"--gpus {gpus}: the engine could not give this container GPUs: "
                            f"{str(exc).splitlines()[0][:200]}") from None
        return [], "CPU-only: GPU checks skipped (no GPU could be given to a container)"
    finally:
        container.remove(force=True)
    names = [n.strip() for n in out.decode().splitlines() if n.strip()]
    return request, f"GPU x{len(names)}: {', '.join(sorted(set(names)))}"


def run_container(client: engine.Client, image: str, command: list[str], timeout_s: int,
                  **kwargs: Any) -> tuple[int, str]:
    """Run a command in a fresh container of the image and remove it, whatever happens; returns the exit
    code (124 when it outran timeout_s) and the logs."""
    container = client.containers.run(image, command, detach=True, labels={TEST_LABEL: RUN}, **kwargs)
    try:
        try:
            code = int(container.wait(timeout=timeout_s).get("StatusCode", -1))
        except Exception:  # the wait timed out: a hung check
            container.kill()
            code = 124
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


def suite(client: engine.Client, image: str, labels: dict[str, str], devices: list[DeviceRequest],
          require_gpu: bool, name: str = "suite", args: tuple[str, ...] = (), **kwargs: Any) -> list[Result]:
    """The in-image suite; its results come back as one JSON line in the container's output."""
    n = len(devices) and (devices[0].count if devices[0].count != -1 else None)
    command = ["python", "-m", "smoke_tests", "--json", "-"]
    command += ["--require-gpu"] if require_gpu else []
    command += list(args)
    command += ["--gpus", str(n)] if isinstance(n, int) and n > 0 else []
    env = {"PYTHONPATH": "/opt/imgbuild", "IMGBUILD_EXPECT": json.dumps(expectations(labels))}
    code, logs = run_container(client, image, command, SUITE_TIMEOUT_S, shm_size=SHM,
                               device_requests=devices or None, environment=env, **kwargs)
    found = [line[len(RESULTS_MARKER):] for line in logs.splitlines() if line.startswith(RESULTS_MARKER)]
    if not found:
        tail = " | ".join(logs.strip().splitlines()[-3:])
        return [Result(name, "FAIL", f"the suite did not finish (exit {code}): {tail}", 0.0)]
    return [Result(**r) for r in json.loads(found[-1])["results"]]


def image_checks(client: engine.Client, image: str, labels: dict[str, str]) -> list[Result]:
    """pytest-testinfra over the docker backend, against a container of the image kept running."""
    container = client.containers.run(image, ["sleep", "infinity"], detach=True, labels={TEST_LABEL: RUN})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            junit = Path(tmp) / "image.xml"
            env = {"IMGBUILD_LABELS": json.dumps(labels)}
            subprocess.run([sys.executable, "-m", "pytest", str(IMAGE_CHECKS), f"--hosts=docker://{container.id}",
                            f"--junitxml={junit}", "-q", "-p", "no:cacheprovider", "--rootdir", tmp],
                           env={**os.environ, **env}, capture_output=True, text=True, timeout=600, check=False)
            return _from_junit(junit, "image.")
    finally:
        container.remove(force=True)


def _from_junit(path: Path, prefix: str) -> list[Result]:
    if not path.is_file():
        return [Result(prefix + "checks", "FAIL", "pytest-testinfra produced no report", 0.0)]
    results = []
    # The report of the pytest run we just started ourselves, not outside input.
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314
        name = prefix + case.get("name", "?").removeprefix("test_").split("[")[0]
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            message = (failure.get("message") or "").splitlines()[0][:400].removeprefix("AssertionError: ")
            results.append(Result(name, "FAIL", message, float(case.get("time", 0))))
        elif skipped is not None:
            results.append(Result(name, "SKIP", skipped.get("message", ""), float(case.get("time", 0))))
        else:
            results.append(Result(name, "PASS", "", float(case.get("time", 0))))
    return results


def restricted(client: engine.Client, image: str, labels: dict[str, str]) -> list[Result]:
    """The CPU checks again under an arbitrary UID with a read-only root and an exec tmpfs on /tmp, as
    Apptainer, enroot and OpenShift run images."""
    # A devel image compiles a CUDA extension here too (the JIT one: the pip one shows nothing new).
    devel = bool(labels.get("io.imgbuild.cuda.toolkit"))
    results = suite(client, image, labels, [], False, name="restricted",
                    args=("--no-ddp", "--skip", "devel.cuda_extension" if devel else "devel."), user="12345:12345",
                    read_only=True, tmpfs={"/tmp": "exec"})
    # Every result of the run, so a check that fails only under these conditions is never dropped.
    return [Result(f"arbitrary_uid_read_only.{r.name}", r.status, r.detail, r.seconds) for r in results]


def _http_status(url: str, token: str | None = None) -> int:
    import urllib.error
    import urllib.request

    # A loopback http URL this module builds itself.
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_for_status(url: str, want: int, timeout_s: float, pause_s: float = 1.0,
                    status: Callable[[str], int] = _http_status) -> int:
    """Poll `url` until it answers `want`, a pause between tries whatever the answer (a refused connection, or
    another status such as a 403 from a port someone else publishes); returns the last answer (0: none)."""
    deadline, last = time.monotonic() + timeout_s, 0
    while True:
        try:
            last = status(url)
        except OSError:
            last = 0
        if last == want or time.monotonic() >= deadline:
            return last
        time.sleep(pause_s)


def jupyter(client: engine.Client, image: str) -> list[Result]:
    """The server answers on 8888 (published on loopback), refuses a request without the token, accepts one
    with it, turns healthy; and an empty JUPYTER_TOKEN is refused at start."""

    results: list[Result] = []
    token = secrets.token_hex(16)
    # (HOST_IP, None) publishes on a free loopback port; docker-py's stubs only know (HOST_IP, PORT).
    container = client.containers.run(image, detach=True, labels={TEST_LABEL: RUN}, environment={  # type: ignore[call-overload]
        "JUPYTER_TOKEN": token}, ports={"8888/tcp": ("127.0.0.1", None)})
    try:
        start = time.monotonic()
        container.reload()
        port = int(container.ports["8888/tcp"][0]["HostPort"])
        base = f"http://127.0.0.1:{port}"
        status = wait_for_status(f"{base}/api", 200, 120)
        results.append(Result("jupyter.answers_on_8888", "PASS" if status == 200 else "FAIL",
                              f"GET /api: {status}", round(time.monotonic() - start, 3)))
        # Through the retry helper too: one slow answer on a loaded host is a retry, not an internal error.
        without = wait_for_status(f"{base}/api/contents", 403, 30)
        results.append(Result("jupyter.refuses_without_token", "PASS" if without == 403 else "FAIL",
                              f"GET /api/contents without a token: {without}", 0.0))
        with_token = wait_for_status(f"{base}/api/contents", 200, 30,
                                     status=lambda url: _http_status(url, token))
        results.append(Result("jupyter.accepts_the_token", "PASS" if with_token == 200 else "FAIL",
                              f"GET /api/contents with JUPYTER_TOKEN: {with_token}", 0.0))
        health = ""
        while time.monotonic() - start < 180 and health != "healthy":
            time.sleep(2)
            container.reload()
            health = container.attrs["State"].get("Health", {}).get("Status", "none")
        results.append(Result("jupyter.healthcheck", "PASS" if health == "healthy" else "FAIL",
                              f"health: {health}", round(time.monotonic() - start, 3)))
    finally:
        container.remove(force=True)
    code, logs = run_container(client, image, ["start-jupyter"], 60, environment={"JUPYTER_TOKEN": ""})
    refused = code != 0 and "would disable authentication" in logs
    results.append(Result("jupyter.empty_token_refused", "PASS" if refused else "FAIL",
                          f"exit {code}: {logs.strip().splitlines()[-1] if logs.strip() else ''}", 0.0))
    return results


def test_image(client: engine.Client, image: str, gpus: str, require_gpu: bool) -> tuple[str, ImageReport]:
    try:
        labels = client.images.get(image).labels
    except engine.ImageNotFound:
        raise UserError(f"no image {image} here; build it first (`imgbuild build`)") from None
    devices, header = gpu_request(client, image, gpus)
    results = suite(client, image, labels, devices, require_gpu)
    results += image_checks(client, image, labels)
    results += restricted(client, image, labels)
    if labels.get("io.imgbuild.flavor") == "jupyter":
        results += jupyter(client, image)
    report = ImageReport(image, tuple(results))
    counts = {status: sum(r.status == status for r in results) for status in ("PASS", "FAIL", "SKIP")}
    records.write(records.TestRecord(str(client.images.get(image).id), image, not report.failed, counts, header))
    return header, report


def write_json(path: Path, header: str, reports: list[ImageReport]) -> None:
    data = {"header": header, "images": [{"image": r.image, "results": [x.as_dict() for x in r.results]}
                                         for r in reports]}
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_junit(path: Path, reports: list[ImageReport]) -> None:
    suites = ET.Element("testsuites")
    for report in reports:
        ts = ET.SubElement(suites, "testsuite", name=report.image, tests=str(len(report.results)),
                           failures=str(sum(r.status == "FAIL" for r in report.results)),
                           skipped=str(sum(r.status == "SKIP" for r in report.results)))
        for r in report.results:
            case = ET.SubElement(ts, "testcase", classname=report.image, name=r.name, time=f"{r.seconds:.3f}")
            if r.status == "FAIL":
                ET.SubElement(case, "failure", message=r.detail)
            elif r.status == "SKIP":
                ET.SubElement(case, "skipped", message=r.detail)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def text(header: str, reports: list[ImageReport]) -> str:
    lines = [header]
    for report in reports:
        lines.append(f"== {report.image}")
        lines += [f"  {r.line()}" for r in report.results]
    lines.append(summary([r for report in reports for r in report.results]))
    return "\n".join(lines)


def remove_test_containers(client: engine.Client) -> None:
    """After Ctrl-C: every container this run started, found by its label."""
    engine.remove_containers(client, [c.id for c in engine.containers(client, f"{TEST_LABEL}={RUN}")])
