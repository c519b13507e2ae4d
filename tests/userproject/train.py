"""A user's own DDP training script (not the project's trainer): each rank trains on its share
of toyset's made-up points with gloo on the CPU, and rank 0 writes result.json to --out.

Starts under `python train.py` with the operator's MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE,
or under torchrun, which sets them for each process it starts. `--fail-at-step N` makes every
rank exit with --exit-code at step N, after saying so: a failing job to diagnose."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import toyset
from torch.nn.parallel import DistributedDataParallel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gloo", help="as the job chart passes it; this script trains on the CPU")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", help="folder for result.json (rank 0); none: nothing is written")
    parser.add_argument("--fail-at-step", type=int, default=0)
    parser.add_argument("--exit-code", type=int, default=3)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = toyset.make()
    x, y = x[rank::world], y[rank::world]
    model = DistributedDataParallel(toyset.model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    if rank == 0:
        print(f"toy: {world} ranks ({args.backend}, cpu), {len(x)} points each", flush=True)
    step, loss = 0, torch.tensor(0.0)
    for epoch in range(1, args.epochs + 1):
        for start in range(0, len(x), 32):
            step += 1
            if step == args.fail_at_step:
                print(f"toy: rank {rank} stops at step {step} with exit code {args.exit_code}, as asked", flush=True)
                dist.destroy_process_group()
                return args.exit_code
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[start:start + 32]), y[start:start + 32])
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"toy: epoch {epoch}/{args.epochs} loss {loss.item():.4f}", flush=True)
    accuracy = (model(x).argmax(1) == y).float().mean().item()
    if rank == 0 and args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps({"world_size": world, "steps": step, "loss": round(loss.item(), 4),
                                                     "accuracy": round(accuracy, 4)}) + "\n")
        print(f"toy: wrote {out / 'result.json'}", flush=True)
    dist.barrier()  # no rank tears its connections down while a peer still uses them
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
