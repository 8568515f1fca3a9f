"""`make test-repeat`: `imgbuild test` on one image RUNS times on a loaded machine, every run's JSON kept, and a
table of each check over the runs (how often it passed, failed, skipped; its slowest time). A check that
fails on a good image only sometimes is a check that tells users their image is broken.

The load: a busy loop per CPU and a disk writer (dd with fdatasync), for as long as the runs last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


WRITER = """
import os, sys
block = b"w" * (1 << 20)
while True:
    with open(sys.argv[1], "wb") as f:
        for _ in range(500):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    os.unlink(sys.argv[1])
"""


def load(scratch: Path) -> list[subprocess.Popen[bytes]]:
    """What keeps the machine busy: a busy loop per CPU, and a writer that syncs 500 MB to disk in a loop."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    return [*busy, subprocess.Popen([sys.executable, "-c", WRITER, str(scratch)])]


def summarize(runs: list[dict[str, object]]) -> str:
    """Markdown: one row per check, the count of each status over the runs and the slowest time."""
    statuses: dict[str, Counter[str]] = defaultdict(Counter)
    slowest: dict[str, float] = defaultdict(float)
    details: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        for image in run["images"]:  # type: ignore[attr-defined]
            for r in image["results"]:
                statuses[r["name"]][r["status"]] += 1
                slowest[r["name"]] = max(slowest[r["name"]], float(r["seconds"]))
                if r["status"] == "FAIL":
                    details[r["name"]].add(str(r["detail"])[:160])
    failed_runs = sum(1 for run in runs if any(r["status"] == "FAIL" for image in run["images"]  # type: ignore[attr-defined]
                                              for r in image["results"]))
    lines = [f"{len(runs)} runs, {failed_runs} with a failed check.", "",
             "| check | PASS | FAIL | SKIP | slowest (s) |", "|---|---|---|---|---|"]
    for name in sorted(statuses):
        c = statuses[name]
        lines.append(f"| {name} | {c['PASS']} | {c['FAIL']} | {c['SKIP']} | {slowest[name]:.1f} |")
    for name, found in sorted(details.items()):
        lines += ["", f"{name} failed with:", *[f"- {d}" for d in sorted(found)]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "repeat")
    parser.add_argument("--no-load", action="store_true", help="run on an idle machine")
    parser.add_argument("--summarize", type=Path, help="only summarize the run-*.json files in this folder")
    parser.add_argument("imgbuild_args", nargs="*", help="passed to `imgbuild test` (e.g. --variant X)")
    args = parser.parse_args()
    if args.summarize:
        runs = [json.loads(p.read_text()) for p in sorted(args.summarize.glob("run-*.json"))]
        print(summarize(runs), end="")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = args.out / "load.bin"
    loaders = [] if args.no_load else load(scratch)
    runs = []
    try:
        for i in range(1, args.runs + 1):
            start = time.monotonic()
            path = args.out / f"run-{i:02d}.json"
            done = subprocess.run([sys.executable, "-c", "from builder.cli import main; main()", "test", "--json",
                                   str(path), *args.imgbuild_args], cwd=ROOT, capture_output=True, text=True,
                                  check=False)
            print(f"run {i}: exit {done.returncode}, {time.monotonic() - start:.0f} s", flush=True)
            if path.is_file():
                runs.append(json.loads(path.read_text()))
    finally:
        for p in loaders:
            p.kill()
            p.wait()
        scratch.unlink(missing_ok=True)
    table = summarize(runs)
    (args.out / "summary.md").write_text(f"`imgbuild test {' '.join(args.imgbuild_args)}`, "
                                         f"{'idle' if args.no_load else 'loaded'} machine\n\n{table}")
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
