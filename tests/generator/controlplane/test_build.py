"""What this machine builds, from one table of groups: each group built once per machine into the
user's cache, keyed by what it is built from, the real node's only when asked. `go` here is a
stand-in script that records its calls and writes empty binaries; the real Go build runs in
`make e2e`, the sandbox image's for real in realnode/test_pause.py."""
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from generator import paths
from generator.controlplane import build, pins
from generator.errors import UserError

FAKE_GO = """#!/bin/sh
echo "$@" >> "$GO_CALLS"
if [ "$1" = build ]; then
  # As a real build adds its packages' lines to go.sum where the module lacks them.
  if [ -n "$GO_ADDS_SUMS" ]; then echo "added by the build" >> go.sum; fi
  shift; out=""
  while [ $# -gt 0 ]; do
    case "$1" in
      -o) out="$2"; shift 2;;
      -ldflags|-tags) shift 2;;
      -trimpath) shift;;
      *) case "$out" in */) : > "$out$(basename "$1")";; *) : > "$out";; esac; shift;;
    esac
  done
else
  name=$(basename "${2%@*}"); : > "$GOBIN/$name"
fi
"""
QUIET = lambda line: None  # noqa: E731


@pytest.fixture
def go(tmp_path, monkeypatch):
    """A `go` on PATH, in a cache of the test's own, that records each call in a file; returns a
    function listing the calls."""
    bindir = tmp_path / "go-bin"
    bindir.mkdir()
    script = bindir / "go"
    script.write_text(FAKE_GO)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "go-calls"
    calls.touch()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("GO_CALLS", str(calls))
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    return lambda: calls.read_text().splitlines()


def every_path() -> dict[str, Path]:
    return {name: build.binary(name) for name in build.files(list(build.table()))}


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


def test_each_group_is_built_once_and_reused(go):
    assert sorted(build.missing()) == sorted(build.files())
    built = build.ensure(say=QUIET)
    assert set(built) == set(build.files()) and all(p.is_file() for p in built.values())
    groups = len(build.part())  # one go call each
    assert len(go()) == groups
    # A second clone, a CI run or a `git clean` asks again: nothing is built.
    assert build.missing() == [] and build.ensure(say=QUIET) == built and len(go()) == groups


def test_a_changed_pin_builds_that_group_alone_beside_the_old_one(go, monkeypatch):
    old = build.ensure(say=QUIET)
    monkeypatch.setattr(pins, "HELM_VERSION", "v4.9.9")
    assert build.missing() == [pins.HELM_BINARY]
    new = build.ensure(say=QUIET)
    assert go()[-1] == f"install {pins.HELM_PACKAGE}@v4.9.9" and len(go()) == len(build.part()) + 1
    assert new["helm"] != old["helm"] and old["helm"].is_file()  # another clone may still use the old pin
    assert new["kubectl"] == old["kubectl"]


def test_etcds_own_source_rebuilds_etcd_alone(go, monkeypatch, tmp_path):
    old = build.ensure(say=QUIET)
    main = tmp_path / "main.go"
    main.write_text(pins.ETCD_MAIN.read_text() + "// changed\n")
    monkeypatch.setattr(pins, "ETCD_MAIN", main)
    assert build.missing() == ["etcd"]
    new = build.ensure(say=QUIET)
    assert new["etcd"] != old["etcd"] and new["kube-apiserver"] == old["kube-apiserver"]
    assert go()[-1].endswith("./cmd/etcd")


def test_an_interrupted_build_is_built_again(go):
    built = build.ensure(say=QUIET)
    (built["helm"].parent / build.COMPLETE).unlink()
    assert build.missing() == [pins.HELM_BINARY]
    build.ensure(say=QUIET)
    assert build.missing() == [] and len(go()) == len(build.part()) + 1


def test_builds_running_side_by_side_build_each_group_once(go):
    results = []
    threads = [threading.Thread(target=lambda: results.append(build.ensure(say=QUIET))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len(go()) == len(build.part())


def test_without_go_the_error_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="is built with `go`, which is not on PATH; install Go"):
        build.ensure(say=QUIET)
    assert not any(Path(tmp_path / "cache").glob("controlplane/*/etcd"))


def test_without_gcc_the_sandbox_image_says_what_to_install(go, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "go-bin"))  # go alone
    with pytest.raises(UserError, match=r"pause.c, gcc -static\) is built with `gcc`.*apt-get install -y gcc libc6-dev"):
        build.ensure(say=QUIET, groups=build.part(node=True))
    assert go() == []  # refused before anything is built


def test_trainer_and_jobset_build_at_their_pins(go):
    built = build.ensure(say=QUIET)
    assert f"install {pins.TRAINER_PACKAGE}@v2.3.0" in go()
    # JobSet cannot be `go install`ed here: it is built in a module of ours that requires v0.12.0.
    assert any(c.startswith("build -o") and c.endswith(" sigs.k8s.io/jobset") for c in go())
    assert built["jobset"].parent != built["kube-apiserver"].parent  # not the control plane's module


def test_a_changed_jobset_pin_rebuilds_jobset_alone(go, monkeypatch, tmp_path):
    old = build.ensure(say=QUIET)
    module = tmp_path / "jobset"
    module.mkdir()
    (module / "go.mod").write_text((pins.JOBSET_MODULE_DIR / "go.mod").read_text().replace("v0.12.0", "v0.12.1"))
    (module / "go.sum").write_text((pins.JOBSET_MODULE_DIR / "go.sum").read_text())
    monkeypatch.setattr(pins, "JOBSET_MODULE_DIR", module)
    assert build.missing() == [pins.JOBSET_BINARY]
    new = build.ensure(say=QUIET)
    assert len(go()) == len(build.part()) + 1 and new["jobset"] != old["jobset"] and new["trainer-controller-manager"] == old[
        "trainer-controller-manager"]


def test_the_nodes_groups_are_built_only_when_asked_beside_the_control_planes(go, tmp_path):
    node = build.files(build.part(node=True))
    # The control plane's build (ensure's default) builds none of them: `cluster build` adds them where the node runs.
    assert set(node).isdisjoint(build.files())
    assert sorted(node) == sorted(["kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "coredns",
                                   "pause.oci.tar"])
    build.ensure(say=QUIET)
    assert sorted(build.missing(build.part(node=True))) == sorted(node)
    for name in node:
        assert build.binary(name).parent.parent == tmp_path / "cache" / "controlplane"
        assert build.binary(name).parent.name.startswith("node-")
    assert build.binary("ctr").parent == build.binary("containerd").parent


def test_the_kubelets_build_leaves_the_control_planes_module_as_it_was_stamped(go, monkeypatch, tmp_path):
    module = tmp_path / "module"
    shutil.copytree(pins.GO_MODULE, module)
    monkeypatch.setattr(pins, "GO_MODULE", module)
    monkeypatch.setenv("GO_ADDS_SUMS", "1")
    before = build.group_dir("kubernetes")
    built = build.ensure(say=QUIET, groups=[pins.KUBELET, pins.KUBE_PROXY])
    assert build.group_dir("kubernetes") == before  # the control plane is not rebuilt for the node
    assert sorted(p.name for p in built["kubelet"].parent.iterdir()) == [build.COMPLETE, "kubelet"]


def test_containerd_and_coredns_are_built_without_cgo(tmp_path):
    table = build.table()
    for group in ("containerd", "coredns"):
        argv, cwd, env = build.go_command(table[group].recipe, "go", tmp_path, {"CGO_ENABLED": "1"})
        assert env["CGO_ENABLED"] == "0" and cwd == table[group].recipe.module, group
    argv = build.go_command(table["containerd"].recipe, "go", tmp_path, {})[0]
    assert argv[argv.index("-tags") + 1] == "no_btrfs no_devmapper no_zfs"


def test_a_change_of_containerds_module_moves_containerd_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    before = every_path()
    module = tmp_path / "containerd-module"
    shutil.copytree(pins.CONTAINERD_MODULE_DIR, module)
    go_mod = module / "go.mod"
    go_mod.write_text(go_mod.read_text().replace(pins.containerd_version(), "v2.4.2"))
    monkeypatch.setattr(pins, "CONTAINERD_MODULE_DIR", module)
    after = every_path()
    assert {n for n in before if before[n] != after[n]} == {"containerd", "containerd-shim-runc-v2", "ctr"}


def test_a_change_of_corednss_plugins_moves_coredns_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    before = every_path()
    module = tmp_path / "coredns-module"
    shutil.copytree(pins.COREDNS_MODULE_DIR, module)
    main = module / "main.go"
    main.write_text(main.read_text().replace('\t_ "github.com/coredns/coredns/plugin/loop"\n', ""))
    monkeypatch.setattr(pins, "COREDNS_MODULE_DIR", module)
    after = every_path()
    assert {n for n in before if before[n] != after[n]} == {"coredns"}
