"""The control plane's binaries: built once per machine into the user's cache, keyed by what they
are built from. `go` here is a stand-in script that records its calls and writes empty binaries;
the real Go build runs in `make e2e`."""
import os
import stat
import threading
from pathlib import Path

import pytest

from generator import paths
from generator.controlplane import build
from generator.errors import UserError

FAKE_GO = """#!/bin/sh
echo "$@" >> "$GO_CALLS"
if [ "$1" = build ]; then
  shift; out=""
  while [ $# -gt 0 ]; do
    case "$1" in -o) out="$2"; shift 2;; -ldflags) shift 2;; *) : > "$out/$(basename "$1")"; shift;; esac
  done
else
  name=$(basename "${2%@*}"); : > "$GOBIN/$name"
fi
"""


@pytest.fixture
def go(tmp_path, monkeypatch):
    """A `go` on PATH that records each call in a file; returns a function listing the calls."""
    bindir = tmp_path / "go-bin"
    bindir.mkdir()
    script = bindir / "go"
    script.write_text(FAKE_GO)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "go-calls"
    calls.touch()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("GO_CALLS", str(calls))
    return lambda: calls.read_text().splitlines()


def test_the_cache_is_the_users_not_the_checkouts(monkeypatch, tmp_path):
    monkeypatch.delenv("PYTORCHJOB_KIT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_dir() == tmp_path / "xdg" / "pytorchjob-kit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_dir() == tmp_path / "home" / ".cache" / "pytorchjob-kit"
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "mine"))
    assert paths.cache_dir() == tmp_path / "mine"
    assert build.binary("kubectl").is_relative_to(tmp_path / "mine")


def test_each_group_is_built_once_and_reused(go, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    assert sorted(build.missing()) == sorted(build.BINARIES)
    paths = build.ensure(say=lambda line: None)
    assert set(paths) == set(build.BINARIES) and all(p.is_file() for p in paths.values())
    groups = len(build.GROUPS)  # etcd, kubernetes, operator, helm, trainer, jobset: one go call each
    assert len(go()) == groups
    # A second clone, a CI run or a `git clean` asks again: nothing is built.
    assert build.missing() == [] and build.ensure(say=lambda line: None) == paths and len(go()) == groups


def test_a_changed_pin_builds_that_group_alone_beside_the_old_one(go, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    old = build.ensure(say=lambda line: None)
    monkeypatch.setattr(build, "HELM_VERSION", "v4.9.9")
    monkeypatch.setitem(build.GROUPS, "helm", ([build.HELM_BINARY], lambda: f"{build.HELM_PACKAGE}@v4.9.9"))
    assert build.missing() == [build.HELM_BINARY]
    new = build.ensure(say=lambda line: None)
    assert go()[-1] == f"install {build.HELM_PACKAGE}@v4.9.9" and len(go()) == len(build.GROUPS) + 1
    assert new["helm"] != old["helm"] and old["helm"].is_file()  # another clone may still use the old pin
    assert new["kubectl"] == old["kubectl"]


def test_etcds_own_source_rebuilds_etcd_alone(go, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    old = build.ensure(say=lambda line: None)
    main = tmp_path / "main.go"
    main.write_text(build.ETCD_MAIN.read_text() + "// changed\n")
    monkeypatch.setattr(build, "ETCD_MAIN", main)
    assert build.missing() == ["etcd"]
    new = build.ensure(say=lambda line: None)
    assert new["etcd"] != old["etcd"] and new["kube-apiserver"] == old["kube-apiserver"]
    assert go()[-1].endswith("./cmd/etcd")


def test_an_interrupted_build_is_built_again(go, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    paths = build.ensure(say=lambda line: None)
    (paths["helm"].parent / build.COMPLETE).unlink()
    assert build.missing() == [build.HELM_BINARY]
    build.ensure(say=lambda line: None)
    assert build.missing() == [] and len(go()) == len(build.GROUPS) + 1


def test_builds_running_side_by_side_build_each_group_once(go, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    results = []
    threads = [threading.Thread(target=lambda: results.append(build.ensure(say=lambda line: None))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len(go()) == len(build.GROUPS)


def test_without_go_the_error_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="`go` is not on PATH; install Go"):
        build.ensure(say=lambda line: None)
    assert not any(Path(tmp_path / "cache").glob("controlplane/*/etcd"))


def test_trainer_and_jobset_build_at_their_pins(go, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    paths = build.ensure(say=lambda line: None)
    assert f"install {build.TRAINER_PACKAGE}@v2.3.0" in go()
    # JobSet cannot be `go install`ed here: it is built in a module of ours that requires v0.12.0.
    assert any(c.startswith("build -o") and c.endswith(" sigs.k8s.io/jobset") for c in go())
    assert build.jobset_version() == "v0.12.0"
    assert paths["jobset"].parent != paths["kube-apiserver"].parent  # not the control plane's module


def test_a_changed_jobset_pin_rebuilds_jobset_alone(go, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    old = build.ensure(say=lambda line: None)
    module = tmp_path / "jobset"
    module.mkdir()
    (module / "go.mod").write_text((build.JOBSET_MODULE_DIR / "go.mod").read_text().replace("v0.12.0", "v0.12.1"))
    (module / "go.sum").write_text((build.JOBSET_MODULE_DIR / "go.sum").read_text())
    monkeypatch.setattr(build, "JOBSET_MODULE_DIR", module)
    assert build.missing() == [build.JOBSET_BINARY] and build.jobset_version() == "v0.12.1"
    new = build.ensure(say=lambda line: None)
    assert len(go()) == len(build.GROUPS) + 1 and new["jobset"] != old["jobset"] and new["trainer-controller-manager"] == old[
        "trainer-controller-manager"]
