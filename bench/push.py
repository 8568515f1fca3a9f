"""`make bench-push`: the first push of the default image by `imgbuild push` against `docker push` of the same
image, each to its own empty local docker-registry, in one invocation; then a second `imgbuild push` of the
same bytes to a third registry, which takes every blob from the blob cache and compresses nothing. Then the
path of a release (build, push on one runner): the image built again with `--keep-layers` (against a plain
`--force` build, for what keeping costs the build) and pushed to a fourth registry with a fresh blob cache,
compressing the build's copies of its layers and reading only the base's from the engine. The page cache is
dropped before each push and build, so none of them reads the image from memory another one left there.
Prints a markdown table and writes bench/results/push.{md,json}.

Needs the engine and Debian's docker-registry (`make test-engine`); builds the default image first where the
engine does not hold it (and then removes it again). The blob cache is a temporary one, removed after.

    python bench/push.py
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import IMGBUILD, RESULTS, VARIANT, cold, say, timed  # noqa: E402  (bench/bench.py, beside this file)
from builder.matrix.resolve import load  # noqa: E402
from builder.oci import layout  # noqa: E402
from tests.helpers import registry  # noqa: E402  (the tests' docker-registry: one start-up)

RUNS = int(os.environ.get("BENCH_RUNS", "1"))


def main() -> None:
    client = docker.from_env()
    ref = load(ROOT / "matrix.yaml").variant(VARIANT).primary_ref
    built_here = False
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        say(f"building {VARIANT} first")
        timed([IMGBUILD, "build", "--variant", VARIANT])
        image, built_here = client.images.get(ref), True
    size = int(image.attrs["Size"])
    rows: dict[str, list[float]] = {"imgbuild push, first": [], "docker push": [], "imgbuild push, again": [],
                                    "imgbuild push, after build --keep-layers": []}
    builds: dict[str, list[float]] = {"imgbuild build --force": [], "imgbuild build --force --keep-layers": []}
    copies = 0
    with tempfile.TemporaryDirectory(prefix="imgbuild-bench-push-", dir=Path.home()) as work:
        for run in range(RUNS):
            for name in "abcd":
                (Path(work) / f"{name}{run}").mkdir()
            with (registry(Path(work) / f"a{run}") as first, registry(Path(work) / f"b{run}") as plain,
                  registry(Path(work) / f"c{run}") as again, registry(Path(work) / f"d{run}") as after):
                env = {"IMGBUILD_BLOB_CACHE": str(Path(work) / f"blobs{run}")}
                # alternate which push reads first, so neither always meets the other's leftovers on disk
                order = ["imgbuild", "docker"] if run % 2 == 0 else ["docker", "imgbuild"]
                for who in order:
                    cold()
                    if who == "imgbuild":
                        seconds, _ = timed([IMGBUILD, "push", "--variant", VARIANT, "--registry",
                                            f"{first}/bench", "--force"], env=env)
                        rows["imgbuild push, first"].append(seconds)
                    else:
                        target = f"{plain}/bench/pytorch:docker-push"
                        client.api.tag(str(image.id), target)
                        try:
                            seconds, _ = timed(["docker", "push", "--quiet", target])
                        finally:
                            client.api.remove_image(target)
                        rows["docker push"].append(seconds)
                    say(f"run {run + 1}: {who}: {seconds:.1f} s")
                cold()
                seconds, done = timed([IMGBUILD, "push", "--variant", VARIANT, "--registry", f"{again}/bench",
                                       "--force"], env=env)
                if "nothing compressed" not in done.stdout + done.stderr:
                    raise SystemExit("bench: the second push compressed again:\n" + done.stderr[-2000:])
                rows["imgbuild push, again"].append(seconds)
                say(f"run {run + 1}: imgbuild again: {seconds:.1f} s")
                kept = {"IMGBUILD_BLOB_CACHE": str(Path(work) / f"kept{run}")}
                for name, flags in (("imgbuild build --force", []), ("imgbuild build --force --keep-layers",
                                                                     ["--keep-layers"])):
                    cold()
                    seconds, _ = timed([IMGBUILD, "build", "--variant", VARIANT, "--force", *flags], env=kept)
                    builds[name].append(seconds)
                    say(f"run {run + 1}: {name}: {seconds:.1f} s")
                copies = sum(f.stat().st_size for f in (Path(kept["IMGBUILD_BLOB_CACHE"]) / "raw").iterdir())
                cold()
                seconds, done = timed([IMGBUILD, "push", "--variant", VARIANT, "--registry", f"{after}/bench",
                                       "--force"], env=kept)
                if " 0 layers compressed from the build's copies" in done.stderr:
                    raise SystemExit("bench: the push after --keep-layers read every layer from the engine:\n"
                                     + done.stderr[-2000:])
                rows["imgbuild push, after build --keep-layers"].append(seconds)
                say(f"run {run + 1}: imgbuild after --keep-layers: {seconds:.1f} s")
    if built_here:
        subprocess.run([IMGBUILD, "prune"], check=False, capture_output=True)

    median = {k: statistics.median(v) for k, v in rows.items()}
    base = median["docker push"]
    lines = [f"# `make bench-push`: {VARIANT}, {size / 1e9:.2f} GB, {os.cpu_count()} CPUs, "
             f"{client.version()['Version']}",
             "",
             f"Medians of {RUNS} run(s) (min-max), page cache dropped before each push; compressed by "
             f"{layout.VERSION!r}, zlib {zlib.ZLIB_RUNTIME_VERSION}. Ratios against `docker push` of the same "
             "image in the same invocation, each push to its own empty local docker-registry.",
             "",
             "| push | seconds | against `docker push` |",
             "|---|---|---|"]
    for name, values in rows.items():
        ratio = base / median[name]
        against = ("baseline" if name == "docker push" else
                   f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower")
        lines.append(f"| {name} | {median[name]:.1f} s ({min(values):.1f}-{max(values):.1f}) | {against} |")
    plain = statistics.median(builds["imgbuild build --force"])
    lines += ["", f"What keeping the layers costs the build (the same image built again, `--force`), and "
              f"{copies / 1e9:.2f} GB of copies on disk until the push:", "",
              "| build | seconds | against the plain build |", "|---|---|---|"]
    for name, values in builds.items():
        ratio = statistics.median(values) / plain
        lines.append(f"| {name} | {statistics.median(values):.1f} s ({min(values):.1f}-{max(values):.1f}) | "
                     + ("baseline" if name == "imgbuild build --force" else f"{ratio:.2f}x the time") + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    (RESULTS / "push.md").write_text(text)
    (RESULTS / "push.json").write_text(json.dumps(
        {"variant": VARIANT, "size": size, "cpus": os.cpu_count(), "engine": client.version()["Version"],
         "packing": layout.VERSION, "zlib": zlib.ZLIB_RUNTIME_VERSION, "machine": platform.machine(),
         "runs": rows, "builds": builds, "copies": copies}, indent=2) + "\n")


if __name__ == "__main__":
    main()
