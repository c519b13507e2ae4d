"""`python -m trainer`: exit 0 when trained, 1 on a launch or data error (no traceback),
143 on SIGTERM (after a checkpoint once training has begun) and 200 when the group lost a peer,
both of which restartPolicy ExitCode retries."""
from __future__ import annotations

import os
import sys

from . import config, cpus, heap


def main(argv: list[str] | None = None) -> int:
    cfg = config.parse(argv)
    heap.keep_freed_memory()  # before torch allocates anything
    import torch

    from . import distributed
    from .data import DataError
    from .train import train

    threads = cpus.for_rank(cfg.threads, torch.get_num_threads())
    if threads:
        torch.set_num_threads(threads)
    code = 1
    try:
        launch = distributed.read_launch(cfg.backend)
        distributed.init(launch, cfg.rdzv_timeout)
        code = train(cfg, launch)
    except (distributed.LaunchError, DataError) as exc:
        rank = os.environ.get("RANK", "0")
        print(f"trainer (rank {rank}): error: {exc}", file=sys.stderr, flush=True)
        if os.environ.get("TRAINER_DEBUG"):
            raise
        code = 1
    except Exception as exc:
        if not distributed.peer_lost(exc) or os.environ.get("TRAINER_DEBUG"):
            raise
        rank = os.environ.get("RANK", "0")
        first = str(exc).strip().splitlines()[0].split(" This is typically")[0] if str(exc).strip() else type(exc).__name__
        print(f"trainer (rank {rank}): the group lost a peer ({first}); exiting {distributed.RETRY_EXIT} so this pod "
              "restarts and joins the Master's next generation, resuming from the newest checkpoint",
              file=sys.stderr, flush=True)
        code = distributed.RETRY_EXIT
    finally:
        distributed.shutdown()
    return code
