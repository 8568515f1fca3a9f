"""The cold build of the default image (`--no-cache --force`, warm wheel cache, the image removed and the page
cache dropped first) by this checkout and by another one, alternated A B B A ... on this engine, in one
invocation: each run's seconds, the medians and their ratio. For a change of the build path, measured
against the commit before it.

    python bench/ab.py OTHER_CHECKOUT [PAIRS]   (PAIRS: A/B pairs, default 2)

Needs the engine and the bootstrapped Debian 12 base, like `make bench`; removes the image it builds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "bench"))

from bench import VARIANT, cold, say, settle  # noqa: E402  (bench/bench.py, beside this file)


def remove(client: docker.DockerClient) -> None:
    """The default image and its skeletons: the build must store every layer anew."""
    for image in client.images.list(filters={"label": f"io.imgbuild.variant={VARIANT}"}):
        try:
            client.api.remove_image(str(image.id), force=True)
        except docker.errors.ImageNotFound:
            continue
        except docker.errors.APIError as exc:
            raise SystemExit(f"ab: {exc}: remove the images built on {VARIANT} first") from None


def build(checkout: Path, logs: Path) -> float:
    remove(docker.from_env())
    settle()
    cold()
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from builder.cli import main; main()", "build", "--variant",
                           VARIANT, "--no-cache", "--force", "--log-dir", str(logs)], cwd=checkout,
                          env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True, text=True,
                          check=False)
    seconds = time.monotonic() - start
    if done.returncode:
        raise SystemExit(f"ab: the build in {checkout} failed:\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    other = Path(sys.argv[1]).resolve()
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    runs: dict[str, list[float]] = {"this": [], "other": []}
    with tempfile.TemporaryDirectory(prefix="imgbuild-ab-") as tmp:
        for pair in range(pairs):
            order = [("this", HERE), ("other", other)]
            for name, checkout in order if pair % 2 == 0 else order[::-1]:
                seconds = build(checkout, Path(tmp) / f"{name}{pair}")
                runs[name].append(seconds)
                say(f"pair {pair + 1}: {name} ({checkout}): {seconds:.1f} s")
    this, base = statistics.median(runs["this"]), statistics.median(runs["other"])
    engine = docker.from_env().version()["Version"]
    print(f"cold build of {VARIANT}, Docker {engine}, {os.cpu_count()} CPUs, {pairs} A/B pairs")
    for name, path in (("this", HERE), ("other", other)):
        print(f"  {name:5} {path}: median {statistics.median(runs[name]):.1f} s "
              f"({', '.join(f'{s:.1f}' for s in runs[name])})")
    print(f"  this against other: {base / this:.2f}x {'faster' if this <= base else 'slower'}")


if __name__ == "__main__":
    main()
