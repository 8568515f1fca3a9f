"""DDP smoke check, run under torchrun: an all_reduce of rank-dependent data (32 MB) must equal the sum one
process computes, and one DDP step on rank-dependent shards must leave every rank's parameters equal to a
single-process step on the whole batch. NCCL on GPUs; gloo on CPU (reported as such, never as NCCL).

`--noop-allreduce` replaces all_reduce with a no-op, to prove that the check fails when reduction is broken.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

SHARD = 4
ELEMENTS = 8 * 1024 * 1024  # 32 MB of float32


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["nccl", "gloo"], required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("--noop-allreduce", action="store_true")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(args.backend, timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if args.backend == "nccl" else torch.device("cpu")
    if args.noop_allreduce:
        dist.all_reduce = lambda tensor, *a, **k: None

    problems = []
    base = torch.arange(ELEMENTS, dtype=torch.float32) % 1000
    mine = (base * (rank + 1)).to(device)
    dist.all_reduce(mine)
    expected = base * sum(r + 1 for r in range(world))
    if not torch.equal(mine.cpu(), expected):
        problems.append(f"rank {rank}: all_reduce of 32 MB differs from the single-process sum")

    torch.manual_seed(0)
    inputs, targets = torch.randn(world * SHARD, 16), torch.randn(world * SHARD, 4)
    model = torch.nn.Linear(16, 4)
    reference = copy.deepcopy(model)
    ddp = DistributedDataParallel(model.to(device), device_ids=[local_rank] if args.backend == "nccl" else None)
    if args.noop_allreduce:
        ddp.register_comm_hook(None, lambda _, bucket: _done(bucket.buffer()))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
    shard = slice(rank * SHARD, (rank + 1) * SHARD)
    torch.nn.functional.mse_loss(ddp(inputs[shard].to(device)), targets[shard].to(device)).backward()
    opt.step()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    torch.nn.functional.mse_loss(reference(inputs), targets).backward()
    ref_opt.step()
    for (name, got), want in zip(model.named_parameters(), reference.parameters(), strict=True):
        if not torch.allclose(got.detach().cpu(), want.detach(), atol=1e-5, rtol=1e-4):
            problems.append(f"rank {rank}: {name} after a DDP step differs from a single-process step on the "
                            "whole batch (gradients were not averaged across ranks)")

    gathered: list[list[str]] = [[] for _ in range(world)]
    dist.all_gather_object(gathered, problems)
    if rank == 0:
        flat = [p for ranks in gathered for p in ranks]
        with Path(args.out).open("w", encoding="utf-8") as f:
            json.dump({"backend": args.backend, "world": world, "problems": flat}, f)
    dist.destroy_process_group()


def _done(buffer: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


if __name__ == "__main__":
    main()
