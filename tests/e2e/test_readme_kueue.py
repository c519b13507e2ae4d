"""The README's `Kueue on your machine` block, run as written on a cluster of its own with the real
Kueue v0.19.2, each command's output compared with the README's sample in the words
test_readme_cluster puts machine-specific text in (and a Workload's generated suffix as ID)."""
from __future__ import annotations

import re
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

# On the real node where it can run (the README's bare `cluster up` chooses it): the cluster's start
# (up to three minutes with Kueue there, when its certificates wait for the kubelet), the trainer's
# image pulled (about a minute) and the block's jobs.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
OWN_CLUSTERS = True  # the README's `cluster up`, in a folder of its own (conftest.Shared)

BLOCK = docs.block("kueue.md", "Kueue on your machine")


def words(text: str, cluster_dir, cache, node: str) -> str:
    text = same_words(text, cluster_dir, cache, node)
    return re.sub(r"\b(pytorchjob-\S+?)-[0-9a-f]{5}\b", r"\1-ID", text)  # Kueue names a Workload <kind>-<job>-<hash>


def _diagnose(command: str, workdir, env) -> str:
    """`diagnose` as written; it exits 1 when it has findings, as a held job has."""
    done = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=workdir, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    assert done.returncode == 1, f"{command}\n{done.stdout}"
    return done.stdout


def test_the_readme_kueue_block_prints_what_the_readme_shows(shell):
    from generator import paths
    from generator.controlplane.realnode import node_name

    workdir, env = shell
    (workdir / "runs").mkdir(exist_ok=True)
    cluster_dir, cache = Path(env["PYTORCHJOB_KIT_CLUSTER"]), paths.cache_dir()
    listed = docs.console_steps(BLOCK)
    assert shlex.split(listed[0][0])[3:6] == ["cluster", "up", "--kueue"] and listed[-1][0].endswith("cluster down")
    try:
        for command, sample in listed:
            printed = _diagnose(command, workdir, env) if " diagnose " in command else \
                readme_cluster.run_step(command, workdir, env, cluster_dir)
            if printed is None:
                if command.startswith("export KUBECONFIG="):
                    pull_trainer_image(env, cluster_dir)
                continue
            expected, printed = (words(t, cluster_dir, cache, node_name()) for t in (sample, printed))
            assert mismatch(expected, printed) == "", f"{command}: {mismatch(expected, printed)}\n{printed}"
    finally:
        subprocess.run([sys.executable, "-m", "generator", "cluster", "down"], cwd=workdir, env=env,
                       capture_output=True, timeout=180)
        forget_images(cluster_dir)  # the real node's unpacked images, gigabytes
