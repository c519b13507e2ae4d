"""`make e2e`'s test processes, from the disk the clusters unpack their images on."""
from __future__ import annotations

from tests.support.e2e_workers import workers

GB = 10**9


def test_as_many_processes_as_asked_where_the_disk_holds_their_clusters():
    assert workers(2, free=40 * GB, total=100 * GB, each=9 * GB) == (2, "")


def test_fewer_processes_where_the_disk_holds_fewer_clusters_saying_the_figures():
    # 27.5 GB free less the kubelet's 1 % of 100 GB (below which it evicts pods) holds two 9 GB clusters, not three.
    fit, said = workers(3, free=int(27.5 * GB), total=100 * GB, each=9 * GB)
    assert fit == 2
    assert said == ("e2e: 27.5 GB free where the clusters unpack their images, and each takes up to 9.0 GB: running "
                    "2 test processes instead of 3")


def test_one_process_and_the_fix_where_not_even_one_cluster_fits():
    fit, said = workers(2, free=5 * GB, total=100 * GB, each=9 * GB)
    assert fit == 1
    assert said.endswith("running 1 test process instead of 2; not even one cluster fits, so `cluster up` will refuse: "
                         "free disk space (old clusters' folders, `podman image prune`)")


def test_an_empty_registry_counts_for_nothing():
    # Before the registry holds the images, `cluster up` pushes them: nothing to size yet.
    assert workers(2, free=1 * GB, total=100 * GB, each=0) == (2, "")
