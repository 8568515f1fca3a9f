"""`python -m smoke_tests`: run the smoke suite here (inside an image, or on any machine with torch).

Prints one line per check (PASS, FAIL, or SKIP with its reason), then "N passed, N failed, N skipped";
exits 1 when a check failed. --json writes every result for imgbuild's host-side runner.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from smoke_tests.results import RESULTS_MARKER, Result, Skip, summary

CHECK_TIMEOUT_S = 300
# Checks that start cold processes or compilers: torchrun's two ranks each import torch, Inductor compiles with
# empty caches. On a loaded 2-CPU host those take minutes, not seconds; they get a longer alarm, and within it
# the subprocess's timeout fires first, and within that the ranks' own rendezvous timeout, so the innermost
# clock always says what was slow.
SLOW_CHECK_TIMEOUT_S = 900
SLOW = ("ddp.", "compile.", "devel.")
DDP_TIMEOUT_S = SLOW_CHECK_TIMEOUT_S - 60
RENDEZVOUS_TIMEOUT_S = DDP_TIMEOUT_S - 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m smoke_tests", description=__doc__)
    parser.add_argument("--expect", default=os.environ.get("IMGBUILD_VARIANT_FILE", "/etc/imgbuild/variant.json"),
                        help="what the image claims (versions, architectures)")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs given to this container, when known")
    parser.add_argument("--require-gpu", action="store_true", help="GPU checks fail instead of skipping")
    parser.add_argument("--json", dest="json_out", help="write every result as JSON to this file ('-': one "
                        f"line on stdout after {RESULTS_MARKER!r})")
    parser.add_argument("--only", default="", help="run only checks whose name starts with this")
    parser.add_argument("--no-ddp", action="store_true", help="skip the multi-process DDP checks")
    parser.add_argument("--skip", action="append", default=[], metavar="PREFIX",
                        help="leave out checks whose name starts with this (repeatable)")
    args = parser.parse_args(argv)

    import torch

    from smoke_tests.suite import CHECKS, Context, expectations

    # imgbuild's runner passes the image's labels; run by hand, the suite reads what the image ships.
    expect = json.loads(os.environ["IMGBUILD_EXPECT"]) if os.environ.get("IMGBUILD_EXPECT") else None
    ctx = Context(expect=expect or expectations(args.expect), gpus=args.gpus, require_gpu=args.require_gpu)
    gpu = torch.cuda.is_available()
    header = (f"GPU x{torch.cuda.device_count()}: {torch.cuda.get_device_name(0)}" if gpu
              else "CPU-only: GPU checks skipped")
    print(header, flush=True)
    results: list[Result] = []
    for name, fn in CHECKS:
        if not name.startswith(args.only) or name.startswith(tuple(args.skip) or ("\0",)):
            continue
        results.append(run_one(name, lambda fn=fn: fn(ctx)))  # type: ignore[misc]
        print(results[-1].line(), flush=True)
    if not args.no_ddp and "ddp".startswith(args.only[:3] or "ddp"):
        for name, call in ddp_checks(gpu, torch.cuda.device_count(), ctx.require_gpu):
            results.append(run_one(name, call))
            print(results[-1].line(), flush=True)
    print(summary(results), flush=True)
    if args.json_out:
        data = {"header": header, "results": [r.as_dict() for r in results]}
        if args.json_out == "-":
            print(RESULTS_MARKER + json.dumps(data), flush=True)
        else:
            Path(args.json_out).write_text(json.dumps(data, indent=2), encoding="utf-8")
    return 1 if any(r.status == "FAIL" for r in results) else 0


def run_one(name: str, call: Callable[[], str]) -> Result:
    """Run one check under a time limit; its exception decides FAIL or SKIP."""

    limit = SLOW_CHECK_TIMEOUT_S if name.startswith(SLOW) else CHECK_TIMEOUT_S

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"no answer within {limit}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    start = time.monotonic()
    try:
        detail = call()
        status = "PASS"
    except Skip as exc:
        status, detail = "SKIP", str(exc)
    except Exception as exc:  # a failing check: its message names the problem
        status, detail = "FAIL", f"{type(exc).__name__}: {exc}" if not isinstance(exc, AssertionError) else str(exc)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return Result(name, status, str(detail), round(time.monotonic() - start, 3))


def run_ddp(backend: str, ranks: int, extra_env: dict[str, str] | None = None, noop: bool = False) -> str:
    """torchrun the DDP script; returns a detail line, or raises with the problems it found."""
    torchrun = shutil.which("torchrun")
    command = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ddp.json"
        command += ["--standalone", "--nnodes=1", f"--nproc-per-node={ranks}", "-m", "smoke_tests.ddp",
                    "--backend", backend, "--out", str(out), "--timeout", str(RENDEZVOUS_TIMEOUT_S)]
        if noop:
            command.append("--noop-allreduce")
        env = {**os.environ, "OMP_NUM_THREADS": "1", **(extra_env or {})}
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=DDP_TIMEOUT_S, check=False)
        if proc.returncode != 0 or not out.exists():
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-3:]
            raise AssertionError(f"torchrun exited {proc.returncode}: {' | '.join(last)}")
        report = json.loads(out.read_text(encoding="utf-8"))
    if report["problems"]:
        raise AssertionError("; ".join(report["problems"]))
    return f"{backend}, {report['world']} ranks: all_reduce of 32 MB exact, DDP step equals the single-process step"


def ddp_checks(gpu: bool, count: int, require_gpu: bool) -> list[tuple[str, Callable[[], str]]]:
    def nccl_skip() -> str:
        if require_gpu:
            raise AssertionError("NCCL needs GPUs and none is available")
        raise Skip("CPU-only: NCCL needs GPUs; the same script ran with gloo on 2 ranks (ddp.gloo_cpu)")

    if not gpu:
        return [("ddp.gloo_cpu", lambda: "DDP (gloo, CPU): " + run_ddp("gloo", 2)),
                ("ddp.nccl", nccl_skip), ("ddp.nccl_shm_transport", nccl_skip)]
    return [("ddp.nccl", lambda: run_ddp("nccl", count)),
            ("ddp.nccl_shm_transport", lambda: run_ddp("nccl", count, {"NCCL_P2P_DISABLE": "1"}))]


if __name__ == "__main__":
    sys.exit(main())
