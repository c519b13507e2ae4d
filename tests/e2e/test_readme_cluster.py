"""The README's `A real cluster on your machine` block, run as written on a cluster of its own, each
command's output compared with the README's sample. What differs between machines by nature
(folders, addresses, ports, process ids, ages, claim ids, the node's name) is put in the same words
on both sides first; everything else must match, with `...` as in every README sample."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import LocalCluster, needs_real_node, pull_images, trainer_image
from tests.support import ROOT, docs
from tests.support.samples import mismatch

BLOCK = docs.block("cluster.md", "A real cluster on your machine")

# Lines of `cluster up` that depend on what this machine had before: its builds and its registry.
MACHINE_STATE = ("building ", "registry serving on ", "read-only registry")
# The real node, which the block runs as a bare `cluster up` chooses it: where it cannot run, `cluster
# up` says so and falls back, and the block's output is not the README's.
pytestmark = [pytest.mark.e2e, needs_real_node]
OWN_CLUSTERS = True  # the README's `cluster up`, in a folder of its own (conftest.Shared)

# The README's own words for what differs on every machine.
README_CLUSTER = "/home/me/pytorchjob-kit/.cache/cluster"
README_CACHE = "/home/me/.cache/pytorchjob-kit"


def demo_values_command() -> list[str]:
    """`make demo`'s first step, which writes runs/demo-values.yaml, read from the Makefile."""
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].replace("\\\n", " ")
    line = next(x for x in recipe.splitlines() if "-m generator values" in x)
    return [sys.executable, *shlex.split(line.strip().removeprefix("$(PY)"))]


def same_words(text: str, cluster_dir: Path, cache: Path, node: str) -> str:
    text = text.replace(str(cluster_dir), README_CLUSTER).replace(str(cache), README_CACHE)
    text = text.replace(f"{ROOT}/", "")  # the README's commands run in the checkout, which this folder stands for
    text = re.sub(rf"\bnode:? {re.escape(node)} \(", lambda m: m.group(0).replace(node, "vm"), text)
    text = re.sub(rf"@{re.escape(node)}\b", "@vm", text)  # a node's processes and logs: PROGRAM@NODE
    text = re.sub(r"\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b", lambda m: "ADDRESS:PORT" if m.group(2) else "ADDRESS", text)
    text = re.sub(r"pvc-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "pvc-ID", text)
    text = re.sub(r"\(pid \d+\)", "(pid PID)", text)
    rows = []
    for line in text.splitlines():
        # `cluster status` rows (name, pid, state, log) and `kubectl get pods` rows (age, node)
        line = re.sub(r"^(\S+\s+)\d+(\s+(running|stopped|exited))", r"\1PID\2", line)
        line = re.sub(r"^(\S+\s+\d+/\d+\s+\S+\s+\d+\s+)\S+(\s+ADDRESS\s+)\S+", r"\1AGE\2vm", line)
        rows.append(re.sub(r" {2,}", " ", line))  # columns are as wide as their values
    return "\n".join(rows)


def run_step(command: str, workdir: Path, env: dict, cluster_dir: Path) -> str | None:
    """One README command as a shell would run it, in `workdir` with `env` (an `export` changes
    `env`, and returns None); what it printed, stdout and stderr together. Fails on a non-zero exit."""
    from generator.controlplane import build

    if command.startswith("export "):
        name, value = command.removeprefix("export ").split("=", 1)
        env[name] = value.replace(README_CLUSTER, str(cluster_dir))
        return None
    words = shlex.split(command)
    if words[0] == "python":
        words[0] = sys.executable
    else:  # the README finds kubectl in the cache folder with a glob, as a shell would
        words[0] = str(build.binary("kubectl"))
        assert Path(words[0]).match(command.split()[0].replace("~/.cache/pytorchjob-kit/", "*/"))
    done = subprocess.run(words, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{command}\n{done.stdout}"
    return done.stdout


def pull_trainer_image(env: dict, cluster_dir: Path) -> None:
    """On the real node, the trainer's image pulled into the README's cluster once it is up, before
    its first job, as the shared cluster's is: the README's waits are then its jobs' own."""
    pull_images(LocalCluster(cluster_dir, Path(env["KUBECONFIG"]), env), [trainer_image()])


@pytest.fixture
def shell(tmp_path, tmp_path_factory):
    """A clone's folder (runs/ beside charts/) and a shell whose cluster lives in a folder of its own,
    with a path short enough for the real node's sockets (a test's own tmp_path is too long)."""
    (tmp_path / "charts").symlink_to(ROOT / "charts")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
           "PYTORCHJOB_KIT_CLUSTER": str(tmp_path_factory.mktemp("readme") / "cluster")}
    env.pop("KUBECONFIG", None)
    made = subprocess.run(demo_values_command(), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    # The registry up and holding this checkout's images, as `make e2e` leaves it: a change of the README
    # (which the trainer's image copies) makes `cluster up` rebuild and push the image, saying so.
    seeded = subprocess.run([sys.executable, "-m", "generator", "image", "registry", "up", "--quiet"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=1800)
    assert seeded.returncode == 0, seeded.stderr
    return tmp_path, env


def without_slow_start_hint(text: str) -> str:
    """`submit --wait` tells what diagnose finds when the job has not run after its first minute (on a
    loaded machine, the claim still binding or the image still unpacking): lines the README's run
    on an idle machine does not show, up to the job's next state."""
    out, hint = [], False
    for line in text.splitlines():
        if " has not started running after " in line:
            hint = True
        elif hint and not line.startswith("demo: "):
            continue
        else:
            hint = False
            out.append(line)
    return "\n".join(out)


def test_the_readme_cluster_block_prints_what_the_readme_shows(shell, monkeypatch):
    from generator import paths
    from generator.controlplane import build
    from generator.controlplane.layout import MARK_FILE
    from generator.controlplane.realnode import node_name, pause

    workdir, env = shell
    cluster_dir, cache = Path(env["PYTORCHJOB_KIT_CLUSTER"]), paths.cache_dir()
    listed = docs.console_steps(BLOCK)
    assert [c.split()[:4] for c, _ in listed] == [
        ["python", "-m", "generator", "cluster"], ["export", f"KUBECONFIG={README_CLUSTER}/kubeconfig"],
        ["python", "-m", "generator", "submit"], ["python", "-m", "generator", "logs"],
        ["~/.cache/pytorchjob-kit/controlplane/kubernetes-*/kubectl", "get", "pods", "-o"],
        ["python", "-m", "generator", "cluster"], ["python", "-m", "generator", "cluster"]]
    up_sample = listed[0][1]
    try:
        for command, sample in listed:
            printed = run_step(command, workdir, env, cluster_dir)
            if printed is None:
                continue
            if command.endswith("cluster up"):
                # What a start builds depends on the machine's caches, and it starts the registry only where it
                # was not up; the README's first-build lines are checked against an empty cache below.
                sample, printed = ("\n".join(x for x in t.splitlines() if not x.startswith(MACHINE_STATE))
                                   for t in (sample, printed))
            if " submit " in command:
                printed = without_slow_start_hint(printed)
            expected, printed = (same_words(t, cluster_dir, cache, node_name()) for t in (sample, printed))
            assert mismatch(expected, printed) == "", f"{command}: {mismatch(expected, printed)}\n{printed}"
    finally:
        subprocess.run([sys.executable, "-m", "generator", "cluster", "down"], cwd=workdir, env=env,
                       capture_output=True, timeout=180)
    # --purge leaves nothing the cluster wrote: only the marker that makes the folder a cluster's.
    purged = subprocess.run([sys.executable, "-m", "generator", "cluster", "down", "--purge"], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=180)
    assert purged.returncode == 0, purged.stderr
    assert [p.name for p in cluster_dir.iterdir()] == [MARK_FILE], purged.stdout

    # This machine built its binaries before: the README's first-build lines are checked against what
    # a build into an empty cache folder says, with the Go toolchain's work left out.
    empty = workdir / "empty-cache"
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(empty))
    monkeypatch.setattr(build, "_go", lambda *args: None)
    monkeypatch.setattr(pause, "build", lambda *args: None)
    said: list[str] = []
    build.ensure(say=said.append)
    build.ensure(say=said.append, groups=build.part(node=True))  # the node's after the control plane's, as `cluster up` builds them
    first_build = "\n".join(x for x in up_sample.splitlines() if x.startswith("building "))
    assert mismatch(same_words(first_build, cluster_dir, cache, "vm"), same_words("\n".join(said), cluster_dir, empty,
                                                                                    "vm")) == ""
