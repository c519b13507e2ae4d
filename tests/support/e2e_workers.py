"""How many e2e test processes this machine's disk holds: each holds one cluster at a time
(tests/e2e/conftest.Shared), and each cluster's containerd unpacks the images its node pulls (the
trainer's, 5 GB and more) in the cluster's folder. `make e2e` runs `python -m tests.support.e2e_workers
[MOST]` for its `-n`: MOST (2) where the disk holds that many clusters, fewer where it does not, saying
so, since a disk that fills mid-suite fails its pulls (ErrImagePull: no space left on device) or
makes the kubelet evict the controllers."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from generator.controlplane import disk
from generator.images.registry import default


def per_cluster() -> int:
    """Bytes one cluster takes at most: what `cluster up` checks for the shared cluster's images
    (each kept compressed while it unpacks, and unpacked)."""
    images = disk.pulled({"leaderElection": True}, operator=True, extra=[])
    return 2 * sum(disk.layers(default(), images).values())


def workers(most: int, free: int, total: int, each: int) -> tuple[int, str]:
    """(processes, what to say: '' when `most` fit) for `free` bytes of a `total`-byte filesystem."""
    room = free - total * disk.EVICTION_PERCENT // 100
    if not each or room >= most * each:
        return most, ""
    fit = max(1, min(most, room // each))
    said = (f"e2e: {disk.gb(free)} free where the clusters unpack their images, and each takes up to {disk.gb(each)}: "
            f"running {fit} test process{'es' if fit > 1 else ''} instead of {most}")
    if room < each:
        said += ("; not even one cluster fits, so `cluster up` will refuse: free disk space (old clusters' folders, "
                 "`podman image prune`)")
    return fit, said


def main(argv: list[str]) -> int:
    most = int(argv[0]) if argv else 2
    usage = shutil.disk_usage(Path(tempfile.gettempdir()))  # pytest's folders, where the clusters are
    fit, said = workers(most, usage.free, usage.total, per_cluster())
    if said:
        print(said, file=sys.stderr)
    print(fit)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
