"""Validation in a user's CI through the pre-commit framework: a sample repository of job values and
manifests names this project's hook in its .pre-commit-config.yaml, as a user's would (a repository and
a rev), and pre-commit, from PyPI in a venv of its own, installs the hook and runs `validate`: the good
files pass, the bad one fails with the field named. The hook repository is a commit of this working
tree, so the hook tested is the one in .pre-commit-hooks.yaml now. pre-commit installs the package and
its dependencies into an environment of its own (one to two minutes): it runs in `make test-slow`."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import MANIFESTS, ROOT, docs, samples, tools

PRE_COMMIT = "pre-commit==4.7.0"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def hook_repository(into: Path) -> str:
    """This working tree's files (tracked and new, as git lists them) committed in a repository of their
    own; its commit, the rev a user's config names."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
        elif source.is_symlink():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            (into / name).symlink_to(os.readlink(source))
    git(into, "init", "-q")
    git(into, "add", "-A")
    git(into, "commit", "-q", "-m", "hooks")
    return git(into, "rev-parse", "HEAD")


def sample_repository(into: Path, hooks: Path, rev: str) -> None:
    (into / "jobs").mkdir(parents=True)
    (into / "jobs" / "good.yaml").write_text("job:\n  name: good\ntopology:\n  workers: 1\n")
    (into / "jobs" / "bad.yaml").write_text("job:\n  name: bad\ntopology:\n  workers: -1\n")
    shutil.copy(MANIFESTS / "tencent-nccl.yaml", into / "jobs" / "manifest.yaml")
    # The docs' config, as written, but for where the hook repository is and its rev.
    config = yaml.safe_load(docs.block("generator.md", "Validate jobs in your CI", fence="yaml"))
    config["repos"][0].update(repo=str(hooks), rev=rev)
    (into / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git(into, "init", "-q")
    git(into, "add", "-A")


@pytest.mark.slow  # pre-commit installs the package and its dependencies: one to two minutes
@pytest.mark.timeout(900)
def test_pre_commit_passes_the_good_files_and_fails_the_bad_one_naming_the_field(tmp_path):
    bin_dir = tools.venv(PRE_COMMIT)
    hooks, sample = tmp_path / "hooks", tmp_path / "sample"
    hooks.mkdir()
    sample_repository(sample, hooks, hook_repository(hooks))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "PRE_COMMIT_HOME": str(tmp_path / "pre-commit"),
           "PYTORCHJOB_KIT_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache"), "LANG": "C.UTF-8"}

    def pre_commit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(bin_dir / "pre-commit"), "run", *args], cwd=sample, env=env, capture_output=True,
                              text=True, timeout=800)

    good = pre_commit("--files", "jobs/good.yaml", "jobs/manifest.yaml")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout
    every = pre_commit("--all-files")
    assert every.returncode == 1, every.stdout + every.stderr
    prompt, sample = docs.block("generator.md", "Validate jobs in your CI", fence="text").split("\n", 1)
    assert prompt == "$ pre-commit run --all-files"
    # pre-commit ends a hook's output with a blank line
    assert samples.mismatch(sample, every.stdout.rstrip("\n")) == "", every.stdout
