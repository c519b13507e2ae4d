"""`python -m trainer`: exit 0 when trained, 1 on a launch or data error (no traceback),
143 after the SIGTERM checkpoint so restartPolicy ExitCode retries the pod."""
from __future__ import annotations

import os
import sys

from . import config


def main(argv: list[str] | None = None) -> int:
    cfg = config.parse(argv)
    import torch

    from . import distributed
    from .data import DataError
    from .train import train

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
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
    finally:
        distributed.shutdown()
    return code
