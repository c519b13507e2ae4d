"""The README's `Trainer v2 on your machine` block, run as written on a cluster of its own with
the real Kubeflow Trainer v2.3.0 and JobSet v0.12.0, each command's output compared with the
README's sample in the words test_readme_cluster puts machine-specific text in."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e import test_readme_cluster as readme_cluster
from tests.e2e.conftest import forget_images
from tests.e2e.test_readme_cluster import pull_trainer_image, same_words
from tests.support import docs
from tests.support.samples import mismatch

shell = readme_cluster.shell  # the same clone's folder and shell, the cluster in a short folder of its own

# On the real node where it can run (the README's bare `cluster up` chooses it): the cluster's start,
# the trainer's image pulled (about a minute) and the block's jobs.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
OWN_CLUSTERS = True  # the README's `cluster up`, in a folder of its own (conftest.Shared)

BLOCK = docs.block("trainer-v2.md", "Trainer v2 on your machine")


def test_the_readme_trainer_block_prints_what_the_readme_shows(shell):
    from generator import paths
    from generator.controlplane.realnode import node_name

    workdir, env = shell
    cluster_dir, cache = Path(env["PYTORCHJOB_KIT_CLUSTER"]), paths.cache_dir()
    listed = docs.console_steps(BLOCK)
    assert shlex.split(listed[0][0])[3:6] == ["cluster", "up", "--trainer"] and listed[-1][0].endswith("cluster down")
    try:
        for command, sample in listed:
            printed = readme_cluster.run_step(command, workdir, env, cluster_dir)
            if printed is None:
                if command.startswith("export KUBECONFIG="):
                    pull_trainer_image(env, cluster_dir)
                continue
            expected, printed = (same_words(t, cluster_dir, cache, node_name()) for t in (sample, printed))
            assert mismatch(expected, printed) == "", f"{command}: {mismatch(expected, printed)}\n{printed}"
    finally:
        subprocess.run([sys.executable, "-m", "generator", "cluster", "down"], cwd=workdir, env=env,
                       capture_output=True, timeout=180)
        forget_images(cluster_dir)  # the real node's unpacked images, gigabytes
