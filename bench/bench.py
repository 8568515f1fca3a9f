"""`make bench`: imgbuild's build speed, image size and layer sharing against a naive Dockerfile, measured in
one invocation on one machine. Prints a markdown table and writes bench/results/{results.md,results.json,
chart.png}. Every figure is the median of BENCH_RUNS runs (default 3), with min and max.

What it needs: the engine (`make engine`), Debian's docker-registry (`make test-engine` installs it), and the
network to PyPI (the naive build and the cold-cache runs download ~3 GB each). It removes what it builds.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from builder.dockerfile import render  # noqa: E402  (the project root, above)
from builder.engine import client as engine  # noqa: E402
from builder.matrix.project import Project  # noqa: E402
from builder.matrix.resolve import load  # noqa: E402
from builder.pins import lockfile, wheels  # noqa: E402
from tests.helpers import registry  # noqa: E402  (the tests' docker-registry: one start-up)

RESULTS = ROOT / "bench" / "results"
IMGBUILD = str(Path(sys.executable).parent / "imgbuild")
VARIANT = "2.7.1-cu126-debian12-runtime"
OTHER = "2.7.0-cu126-debian12-runtime"  # the other torch release on the same OS and wheel variant
JUPYTER = "2.7.1-cu126-debian12-jupyter"
BASE = "imgbuild/base:debian12"
NAIVE_TAG = "imgbuild-bench/naive:latest"
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
HASH_LABEL = "io.imgbuild.build-hash"


@dataclass
class Series:
    """One measured quantity over several runs."""

    name: str
    unit: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def cell(self) -> str:
        if not self.values:
            return "-"
        fmt = "{:.2f}" if self.median < 10 else "{:.1f}"
        if len(self.values) == 1:
            return f"{fmt.format(self.median)} {self.unit}"
        return (f"{fmt.format(self.median)} {self.unit} ({fmt.format(min(self.values))}-"
                f"{fmt.format(max(self.values))}, n={len(self.values)})")


def say(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def settle() -> None:
    """Wait until the disk has written back what earlier commands left in the page cache: on a disk of a
    hundred MB/s, a build started while the last one's 6 GB are still being flushed is measured against
    that flush, not against its baseline."""
    os.sync()
    for _ in range(240):
        with Path("/proc/meminfo").open() as f:
            pending = sum(int(line.split()[1]) for line in f if line.startswith(("Dirty:", "Writeback:")))
        if pending < 64 * 1024:  # kB
            return
        time.sleep(0.5)


def cold() -> None:
    """Written back and dropped: the next command reads what it needs from the disk, not from memory an
    earlier one left."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    settle()  # every timed command starts on an idle disk
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          check=False)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(command[:4])} ... failed ({done.returncode}):\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds, done


# ---- cleaning ------------------------------------------------------------------------------------------

def remove_built(client: docker.DockerClient) -> None:
    """Every image but the bases: what imgbuild and the naive build made, with their build cache."""
    keep = {str(client.images.get(BASE).id)}
    for _ in range(6):  # children first: repeat until nothing removable is left
        left = [i for i in client.images.list(all=True) if str(i.id) not in keep
                and not any(t.startswith("imgbuild/base:") for t in i.tags)]
        if not left:
            return
        for image in left:
            try:
                client.api.remove_image(str(image.id), force=True)
            except docker.errors.APIError:
                continue


def empty_wheel_cache() -> None:
    for part in ("files", "sha256"):
        shutil.rmtree(wheels.root() / part, ignore_errors=True)


# ---- builds --------------------------------------------------------------------------------------------

def imgbuild_build(variant: str, logs: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, object]:
    out = logs / "result.json"
    seconds, _ = timed([IMGBUILD, "build", "--variant", variant, "--log-dir", str(logs), "--json", str(out),
                        *extra], env=env)
    result = json.loads(out.read_text())[0]
    result["wall"] = seconds
    return dict(result)


HOST_CA = Path(os.environ.get("BENCH_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))


def naive_build(env: dict[str, str] | None = None, network: tuple[str, ...] = ()) -> float:
    context = ROOT / "bench" / "naive"
    shutil.copyfile(HOST_CA, context / "host-ca.pem")
    try:
        seconds, _ = timed(["docker", "build", "--no-cache", "--quiet", *network, "-t", NAIVE_TAG, "--build-arg",
                            f"BASE_IMAGE={BASE}", str(context)], env={"DOCKER_BUILDKIT": "0", **(env or {})})
    finally:
        (context / "host-ca.pem").unlink()
    return seconds


# ---- sizes ---------------------------------------------------------------------------------------------

def installed_size(variant: str) -> tuple[int, int]:
    """The locked wheels' installed size (every file each wheel holds, uncompressed) and their download size,
    for the variant's Python and platform, from the wheel cache."""
    res = load(ROOT / "matrix.yaml")
    v = res.variant(variant)
    path = Project(ROOT).lock_path(v)
    lock = lockfile.parse(path.read_text(), str(path))
    target = wheels.Target(v.python, res.facts.os[v.os].glibc)
    installed = download = 0
    for entry in lock.entries:
        wheel = wheels.cached(entry, target)
        if wheel is None:
            raise SystemExit(f"bench: {entry.name} is not in the wheel cache")
        download += wheel.stat().st_size
        with zipfile.ZipFile(wheel) as z:
            installed += sum(i.file_size for i in z.infolist() if not i.is_dir())
    return installed, download


def in_image(client: docker.DockerClient, image: str, script: str) -> str:
    out = client.containers.run(image, ["/opt/venv/bin/python", "-c", script], remove=True, user="1000:100",
                                entrypoint=[], network_disabled=True)
    return out.decode() if isinstance(out, bytes) else str(out)


RECORD_CHECK = r"""
import base64, csv, hashlib, pathlib, sys, sysconfig
site = pathlib.Path(sysconfig.get_paths()["purelib"])
checked = bad = pyc = 0
for record in site.glob("*.dist-info/RECORD"):
    for row in csv.reader(record.read_text().splitlines()):
        if len(row) < 3 or not row[1]:
            continue
        path = (site / row[0]).resolve()
        algo, _, want = row[1].partition("=")
        h = hashlib.new(algo, path.read_bytes()).digest()
        got = base64.urlsafe_b64encode(h).rstrip(b"=").decode()
        checked += 1
        if got != want or (row[2] and int(row[2]) != path.stat().st_size):
            bad += 1
            print("MISMATCH", path, file=sys.stderr)
pycs = list(pathlib.Path("/opt/venv").rglob("*.pyc"))
pyc = sum(p.stat().st_size for p in pycs)
# Bytecode twice over: an optimised copy, or a .pyc whose source is not there.
twice = sum(1 for p in pycs if ".opt-" in p.name or not (p.parent.parent / (p.name.split(".")[0] + ".py")).exists())
print(checked, bad, pyc, twice)
"""


def layer_sizes(client: docker.DockerClient, image: str) -> list[tuple[str, int]]:
    """(diff ID, size) of each layer, bottom first."""
    attrs = client.api.inspect_image(image)
    history = [h for h in reversed(client.api.history(image))]
    diff_ids = attrs["RootFS"]["Layers"]
    sizes = [int(h["Size"]) for h in history]
    from builder.engine.images import engine_config

    config = engine_config(client, image)
    if config is None:
        raise SystemExit(f"bench: cannot tell the layers of {image} from its history")
    steps = config["history"]
    assert isinstance(steps, list)
    layered = [size for size, step in zip(sizes, steps, strict=True) if not step.get("empty_layer")]
    return list(zip(diff_ids, layered, strict=True))


def shared_bytes(a: list[tuple[str, int]], b: list[tuple[str, int]]) -> int:
    """Bytes of the common bottom layers: the engine stores a layer once per chain (same layers below)."""
    total = 0
    for (da, sa), (db, _) in zip(a, b, strict=False):
        if da != db:
            break
        total += sa
    return total


def chains(layers: list[tuple[str, int]]) -> dict[str, int]:
    """Chain key (every diff ID up to the layer) -> the layer's size."""
    out, key = {}, ""
    for diff_id, size in layers:
        key += diff_id
        out[key] = size
    return out


# ---- the run -------------------------------------------------------------------------------------------

def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    client = engine.connect()
    if engine.image_or_none(client, BASE) is None:
        say(f"bootstrapping {BASE}")
        timed([IMGBUILD, "base", "bootstrap", "debian12"])
    work = Path(tempfile.mkdtemp(prefix="imgbuild-bench-"))
    s: dict[str, Series] = {k: Series(k, u) for k, u in (
        ("naive_cold", "s"), ("imgbuild_cold_warm_cache", "s"), ("imgbuild_cold_cold_cache", "s"),
        ("unchanged_imgbuild", "s"), ("unchanged_docker", "s"), ("registry_pull", "s"),
        ("pip_install", "s"), ("uv_install", "s"))}
    image_ids: set[str] = set()
    try:
        say(f"{RUNS} rounds of cold builds: naive, imgbuild with a warm wheel cache, with a cold one")
        for i in range(RUNS):  # the cold-cache build first: it fills the cache the warm-cache build uses
            remove_built(client)
            empty_wheel_cache()
            r = imgbuild_build(VARIANT, work / f"cold{i}", "--no-cache")
            s["imgbuild_cold_cold_cache"].values.append(float(r["wall"]))  # type: ignore[arg-type]
            image_ids.add(str(r["image_id"]))
            assert int(r["bytes_downloaded"]) > 2_000_000_000, r  # type: ignore[call-overload]
            say(f"round {i + 1}: imgbuild, cold wheel cache {r['wall']:.1f} s "
                f"({int(r['bytes_downloaded']) / 1e9:.2f} GB downloaded)")  # type: ignore[call-overload]
            remove_built(client)
            s["naive_cold"].values.append(naive_build())
            naive_size = int(client.images.get(NAIVE_TAG).attrs["Size"])
            say(f"round {i + 1}: naive {s['naive_cold'].values[-1]:.1f} s")
            remove_built(client)
            r = imgbuild_build(VARIANT, work / f"warm{i}", "--no-cache")
            s["imgbuild_cold_warm_cache"].values.append(float(r["wall"]))  # type: ignore[arg-type]
            image_ids.add(str(r["image_id"]))
            say(f"round {i + 1}: imgbuild, warm wheel cache {r['wall']:.1f} s")
        prime = imgbuild_build(VARIANT, work / "prime")  # up to date: the image the later phases measure
        image_ids.add(str(prime["image_id"]))
        say("unchanged variant: imgbuild (a new process each time) against docker build of what the engine builds")
        built = str(prime["image_id"])
        build_hash = client.images.get(built).labels[HASH_LABEL]
        context = work / "skeleton"  # the Dockerfile the engine builds: the OS stage and the metadata
        context.mkdir()
        matrix = ROOT / "matrix.yaml"
        engine_built = render.skeleton(load(matrix).variant(VARIANT), Project.for_matrix(matrix))
        (context / "Dockerfile").write_bytes(engine_built[0].content)
        for _ in range(max(RUNS, 5)):
            seconds, done = timed([IMGBUILD, "build", "--variant", VARIANT, "--log-dir", str(work / "unchanged")])
            assert "up-to-date" in done.stdout, done.stdout
            s["unchanged_imgbuild"].values.append(seconds)
            seconds, _ = timed(["docker", "build", "--quiet", "--network", "host", "--build-arg",
                                f"BASE_IMAGE={BASE}", "--label", f"{HASH_LABEL}={build_hash}",
                                str(context)], env={"DOCKER_BUILDKIT": "0"})
            s["unchanged_docker"].values.append(seconds)

        say("size: the image, its files checked against their wheels' RECORDs, the floor")
        image = client.images.get(built)
        checked, bad, pyc, twice = (int(x) for x in in_image(client, built, RECORD_CHECK).split())
        smoke_seconds, smoke = timed([IMGBUILD, "test", "--variant", VARIANT])
        installed, download = installed_size(VARIANT)
        base_size = int(client.images.get(BASE).attrs["Size"])

        say("a fresh engine whose registry holds the image: push once, then pull instead of building")
        with registry(work) as served:
            host = f"{served}/bench"
            timed([IMGBUILD, "push", "--variant", VARIANT, "--registry", host, "--force"])
            for i in range(RUNS):
                remove_built(client)
                r = imgbuild_build(VARIANT, work / f"pull{i}", "--registry", host)
                assert r["status"] == "pulled" and r["image_id"] == built, r
                s["registry_pull"].values.append(float(r["wall"]))  # type: ignore[arg-type]
                say(f"pull {i + 1}: {r['wall']:.1f} s")

        say("sharing: the other torch release and the jupyter flavour next to the runtime image")
        other = imgbuild_build(OTHER, work / "other")
        jupyter = imgbuild_build(JUPYTER, work / "jupyter")
        images = {name: str(r["image_id"]) for name, r in ((VARIANT, {"image_id": built}), (OTHER, other),
                                                            (JUPYTER, jupyter))}
        layers = {name: layer_sizes(client, i) for name, i in images.items()}
        sizes = {name: int(client.images.get(i).attrs["Size"]) for name, i in images.items()}
        union: dict[str, int] = {}
        for name in images:
            union.update(chains(layers[name]))

        say("lever: pip against uv, installing the same locked wheels from the wheel cache on this host")
        lock = ROOT / "locks" / f"{VARIANT}.txt"
        for i in range(RUNS):
            venv = work / f"venv-pip{i}"
            subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", str(venv)], check=True)
            seconds, _ = timed([str(venv / "bin/pip"), "install", "--quiet", "--no-index", "--find-links",
                                str(wheels.root() / "files"), "--require-hashes", "--no-deps", "--no-compile",
                                "--no-cache-dir", "--disable-pip-version-check", "-r", str(lock)])
            s["pip_install"].values.append(seconds)
            shutil.rmtree(venv)
            venv = work / f"venv-uv{i}"
            subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
            seconds, _ = timed([str(Path(sys.executable).parent / "uv"), "pip", "install", "--quiet", "--no-config",
                                "--python", str(venv / "bin/python"), "--no-index", "--find-links",
                                str(wheels.root() / "files"), "--require-hashes", "--no-deps", "--cache-dir",
                                str(work / f"uv-cache{i}"), "--link-mode", "hardlink", "-r", str(lock)])
            s["uv_install"].values.append(seconds)
            shutil.rmtree(venv)
            shutil.rmtree(work / f"uv-cache{i}")
            say(f"lever {i + 1}: pip {s['pip_install'].values[-1]:.1f} s, uv {s['uv_install'].values[-1]:.1f} s")
    finally:
        remove_built(client)
        shutil.rmtree(work, ignore_errors=True)

    facts = {
        "runs": RUNS, "variant": VARIANT, "image_size": int(image.attrs["Size"]),
        "naive_size": naive_size,
        "base_size": base_size, "wheels_installed": installed, "wheels_download": download, "pyc": pyc,
        "pyc_twice": twice,
        "record_files_checked": checked, "record_mismatches": bad, "smoke": "\n".join(smoke.stdout.splitlines()[-8:]),
        "smoke_seconds": smoke_seconds, "cold_image_ids": sorted(image_ids),
        "sizes": sizes, "shared_other": shared_bytes(layers[VARIANT], layers[OTHER]),
        "shared_jupyter": shared_bytes(layers[VARIANT], layers[JUPYTER]),
        "jupyter_runtime_layers_below": layers[JUPYTER][:len(layers[VARIANT])] == layers[VARIANT],
        "disk_unique": sum(union.values()), "sum_sizes": sum(sizes.values()),
        "series": {k: v.values for k, v in s.items()},
        "machine": f"{os.cpu_count()} CPUs, Docker {client.version().get('Version')} (classic builder)",
    }
    (RESULTS / "results.json").write_text(json.dumps(facts, indent=2) + "\n")
    table = report(facts, s)
    (RESULTS / "results.md").write_text(table)
    print(table)
    chart(s, facts)


ENGINE_RUNS = int(os.environ.get("BENCH_RUNS", "1"))


def engines_main() -> None:
    """`make bench-engines`: the cold build with a warm wheel cache on each engine of the test bed (the host's
    Docker 20.10, and Docker 28.5 with overlay2 and with the containerd store, started beside it by the test
    harness and removed after), against the naive Dockerfile on the same engine in the same invocation, and
    `imgbuild test` of the image there. Every build here runs with the host's network (--network host for
    the naive one too): the inner engines have no NAT. BENCH_RUNS rounds (default 1 here: about 8 minutes an
    engine). The build of the default image is checked against its committed digests on each."""
    from tests.engines import inner_engine  # the test bed's engines: the bench measures on the same ones

    RESULTS.mkdir(parents=True, exist_ok=True)
    host = engine.connect()
    work = Path(tempfile.mkdtemp(prefix="imgbuild-bench-engines-"))
    rows: dict[str, dict[str, object]] = {}

    def measure(label: str, client: docker.DockerClient, env: dict[str, str]) -> None:
        if engine.image_or_none(client, BASE) is None:
            say(f"{label}: bootstrapping {BASE}")
            timed([IMGBUILD, "base", "bootstrap", "debian12"], env=env)
        s = {k: Series(k, "s") for k in ("naive", "imgbuild", "load")}
        digests: set[str] = set()
        smoke: set[str] = set()
        for i in range(ENGINE_RUNS):
            remove_built(client)
            s["naive"].values.append(naive_build(env, ("--network", "host")))
            remove_built(client)
            r = imgbuild_build(VARIANT, work / f"{label}-build{i}", "--no-cache", env=env)
            s["imgbuild"].values.append(float(r["wall"]))  # type: ignore[arg-type]
            digests.add(str(r["digests"]))
            _, tested = timed([IMGBUILD, "test", "--variant", VARIANT], env=env)  # the smoke suite, no GPU here
            smoke.add(tested.stdout.strip().splitlines()[-1])
            # The floor of any build that hands the engine finished layers: the engine's own `docker load` of
            # this image (above the base it keeps), from a file, every layer the engine must store.
            archive = work / f"{label}-saved{i}.tar"
            timed(["docker", "save", "-o", str(archive), str(r["image_id"])], env=env)
            remove_built(client)
            s["load"].values.append(timed(["docker", "load", "-q", "-i", str(archive)], env=env)[0])
            archive.unlink()
            say(f"{label} round {i + 1}: naive {s['naive'].values[-1]:.1f} s, imgbuild "
                f"{s['imgbuild'].values[-1]:.1f} s (committed digests: {r['digests']}), docker load of the "
                f"image {s['load'].values[-1]:.1f} s")
        remove_built(client)
        version = client.version().get("Version")
        rows[label] = {"engine": f"Docker {version}", "digests": sorted(digests), "smoke": sorted(smoke),
                       "series": {k: v.values for k, v in s.items()},
                       "cells": {k: v.cell() for k, v in s.items()},
                       "medians": {k: v.median for k, v in s.items()}}

    try:
        measure("20.10 overlay2", host, {})
        for store in ("overlay2", "containerd"):
            with inner_engine(host, store) as inner:
                measure(f"28.5 {store}", inner.client(), {"DOCKER_HOST": inner.host})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = engines_table(rows)
    (RESULTS / "engines.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "engines.md").write_text(table)
    print(table)


def disk_speed() -> str:
    """The sequential write speed of the disk under the engine's data root: 1 GiB written and synced."""
    with tempfile.NamedTemporaryFile(dir="/var/lib/docker" if os.access("/var/lib/docker", os.W_OK) else None,
                                     prefix="imgbuild-bench-") as f:
        block = os.urandom(1 << 20)
        start = time.monotonic()
        for _ in range(1024):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
        seconds = time.monotonic() - start
    return f"{1024 / seconds:.0f} MiB/s written and synced (1 GiB, under /var/lib/docker)"


def versus(baseline: float, measured: float) -> str:
    return f"{baseline / measured:.2f}x faster" if measured <= baseline else f"{measured / baseline:.2f}x slower"


def engines_table(rows: dict[str, dict[str, object]]) -> str:
    lines = [f"# `make bench-engines`: {VARIANT}, {os.cpu_count()} CPUs, cold builds with a warm wheel cache",
             "",
             f"Medians of {ENGINE_RUNS} run(s) (min-max). Cold: `--no-cache`, every image but the base removed. "
             "Ratios against the naive Dockerfile built on the same engine in the same invocation. `docker load`: "
             "the engine's own load of the built image from a file, every image but the base removed first (the "
             "floor of any build that hands the engine finished layers). Each timed command starts after `sync`, "
             f"once the disk has written back what the one before left in the page cache. Disk: {disk_speed()}.",
             "",
             "| engine | naive | imgbuild | ratio | `docker load` of the image | committed digests | `imgbuild test` |",
             "|---|---|---|---|---|---|---|"]
    for label, row in rows.items():
        cells, med = row["cells"], row["medians"]
        lines.append(f"| {label} ({row['engine']}) | {cells['naive']} | {cells['imgbuild']} | "  # type: ignore[index]
                     f"{versus(med['naive'], med['imgbuild'])} | {cells['load']} | "  # type: ignore[index]
                     f"{', '.join(row['digests'])} | "  # type: ignore[arg-type]
                     f"{'; '.join(row['smoke'])} |")  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def report(f: dict[str, object], s: dict[str, Series]) -> str:
    gb: Callable[[object], str] = lambda n: f"{int(n) / 1e9:.2f} GB"  # type: ignore[call-overload]  # noqa: E731
    naive, warm = s["naive_cold"].median, s["imgbuild_cold_warm_cache"].median
    cold = s["imgbuild_cold_cold_cache"].median
    floor = int(f["base_size"]) + int(f["wheels_installed"])  # type: ignore[call-overload]
    size = int(f["image_size"])  # type: ignore[call-overload]
    lines = [
        f"# `make bench`: {f['variant']}, {f['machine']}",
        "",
        f"Medians of {f['runs']} runs (min-max). Cold: no Docker cache (`--no-cache`, earlier images removed; the "
        f"bootstrapped base kept). Ratios are against the baseline measured in the same invocation.",
        "",
        "| measure | imgbuild | baseline | ratio | target | met |",
        "|---|---|---|---|---|---|",
        f"| cold build, warm wheel cache | {s['imgbuild_cold_warm_cache'].cell()} | naive {s['naive_cold'].cell()} "
        f"| {ratio(naive, warm)} faster | >= 2x | {'yes' if naive / warm >= 2 else 'no'} |",
        f"| cold build, cold wheel cache (downloads ~3 GB) | {s['imgbuild_cold_cold_cache'].cell()} | naive "
        f"{s['naive_cold'].cell()} | {ratio(naive, cold)} faster | (reported) | - |",
        f"| unchanged variant, warm engine (CLI start-up included) | {s['unchanged_imgbuild'].cell()} | "
        f"`docker build` {s['unchanged_docker'].cell()} | "
        f"{ratio(s['unchanged_imgbuild'].median, s['unchanged_docker'].median)} slower | < 1 s | "
        f"{'yes' if s['unchanged_imgbuild'].median < 1 else 'no'} |",
        f"| fresh engine, registry holds the build hash: pull | {s['registry_pull'].cell()} | cold build "
        f"{s['imgbuild_cold_warm_cache'].cell()} | {ratio(warm, s['registry_pull'].median)} faster | >= 5x | "
        f"{'yes' if warm / s['registry_pull'].median >= 5 else 'no'} |",
        f"| runtime image size | {gb(size)} | floor {gb(floor)}; naive {gb(f['naive_size'])} | "
        f"{size / floor:.3f}x floor; {size / int(f['naive_size']):.2f}x naive | <= 1.03x floor | "  # type: ignore[call-overload]
        f"{'yes' if size / floor <= 1.03 else 'no'} |",
        f"| shared by torch 2.7.0 and 2.7.1 runtime | {gb(f['shared_other'])} | - | - | >= 3 GB | "
        f"{'yes' if int(f['shared_other']) >= 3e9 else 'no'} |",  # type: ignore[call-overload]
        f"| jupyter shares all of its runtime's layers | {gb(f['shared_jupyter'])} "
        f"({'all' if f['jupyter_runtime_layers_below'] else 'NOT all'}) | - | - | all | "
        f"{'yes' if f['jupyter_runtime_layers_below'] else 'no'} |",
        f"| disk for the 3 images (unique layers) | {gb(f['disk_unique'])} | sum of sizes {gb(f['sum_sizes'])} | "
        f"{int(f['disk_unique']) / int(f['sum_sizes']):.2f}x | - | - |",  # type: ignore[call-overload]
        f"| lever: install the locked wheels, uv | {s['uv_install'].cell()} | pip {s['pip_install'].cell()} | "
        f"{ratio(s['pip_install'].median, s['uv_install'].median)} faster | - | - |",
        "",
        f"Size floor = the base with the distro packages ({gb(f['base_size'])}) + the locked wheels installed "
        f"({gb(f['wheels_installed'])}; {gb(f['wheels_download'])} to download). The image adds "
        f"{gb(f['pyc'])} of checked-hash bytecode ({f['pyc_twice']} .pyc files that are an optimised second copy "
        f"or have no source). Every one of the {f['record_files_checked']} files the "
        f"wheels' RECORDs list matched its hash ({f['record_mismatches']} mismatches); smoke suite:",
        "",
        "```",
        str(f["smoke"]).strip(),
        "```",
        "",
        f"Cold builds gave {len(f['cold_image_ids'])} image ID(s): {', '.join(i[:19] for i in f['cold_image_ids'])}"  # type: ignore[attr-defined]
        f" (one ID: bit-for-bit the same image on every cold build, with and without a warm wheel cache).",
        "",
    ]
    return "\n".join(lines)


def chart(s: dict[str, Series], f: dict[str, object]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [("naive_cold", "naive,\ncold"), ("imgbuild_cold_cold_cache", "imgbuild,\ncold, cold\nwheel cache"),
             ("imgbuild_cold_warm_cache", "imgbuild,\ncold, warm\nwheel cache"),
             ("registry_pull", "imgbuild,\nregistry\npull"), ("unchanged_imgbuild", "imgbuild,\nunchanged")]
    med = [s[k].median for k, _ in names]
    err = [[s[k].median - min(s[k].values) for k, _ in names], [max(s[k].values) - s[k].median for k, _ in names]]
    left.bar([label for _, label in names], med, yerr=err, capsize=4, color=["#999"] + ["#2a7"] * 4)
    left.set_ylabel("seconds (median, min-max)")
    left.set_title("Build time")
    for i, m in enumerate(med):
        left.text(i + 0.1, m, f"{m:.1f}", ha="left", va="bottom")  # beside the min-max bar, not under it
    sizes = [("floor", int(f["base_size"]) + int(f["wheels_installed"])),  # type: ignore[call-overload]
             ("imgbuild", int(f["image_size"])), ("naive", int(f["naive_size"])),  # type: ignore[call-overload]
             ("3 images:\nsum of sizes", int(f["sum_sizes"])), ("3 images:\ndisk used", int(f["disk_unique"]))]  # type: ignore[call-overload]
    right.bar([n for n, _ in sizes], [b / 1e9 for _, b in sizes], color=["#999", "#2a7", "#999", "#999", "#2a7"])
    right.set_ylabel("GB")
    right.set_title("Size")
    for i, (_, b) in enumerate(sizes):
        right.text(i, b / 1e9, f"{b / 1e9:.2f}", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(RESULTS / "chart.png", dpi=110)


if __name__ == "__main__":
    engines_main() if sys.argv[1:] == ["--engines"] else main()
