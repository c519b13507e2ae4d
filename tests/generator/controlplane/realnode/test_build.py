"""The real node's build: its groups live in the user's cache beside the control plane's, each in a
folder named for what it is built from, and none is part of the control plane's own build. The
pause image is built for real (gcc -static of the kubernetes module's pause.c) where Go's module
cache holds that module already."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from generator.controlplane import build
from generator.controlplane.realnode import build as real_build

PT_INTERP = 3  # the program header naming a dynamic program's loader


def program_headers(elf: bytes) -> list[int]:
    """The type of each program header of a 64-bit little-endian ELF file."""
    offset, size, count = (int.from_bytes(elf[a:b], "little") for a, b in ((0x20, 0x28), (0x36, 0x38), (0x38, 0x3A)))
    return [int.from_bytes(elf[offset + i * size:offset + i * size + 4], "little") for i in range(count)]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "controlplane"


def test_the_nodes_groups_are_built_only_when_asked_beside_the_control_planes(cache):
    # The control plane's build (build.ensure) builds none of them: `cluster build` adds them where the node runs.
    assert set(real_build.FILES).isdisjoint(build.BINARIES)
    assert sorted(real_build.FILES) == sorted(["kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr",
                                               "coredns", "pause.oci.tar"])
    assert sorted(real_build.missing()) == sorted(real_build.FILES)
    for name in real_build.FILES:
        assert real_build.path(name).parent.parent == cache
        assert real_build.path(name).parent.name.startswith("node-")
    assert real_build.path("ctr").parent == real_build.path("containerd").parent


def test_a_change_of_containerds_module_moves_containerd_alone(cache, tmp_path, monkeypatch):
    before = {name: real_build.path(name) for name in real_build.FILES}
    module = tmp_path / "containerd-module"
    shutil.copytree(real_build.CONTAINERD_MODULE_DIR, module)
    go_mod = module / "go.mod"
    go_mod.write_text(go_mod.read_text().replace(real_build.containerd_version(), "v2.4.2"))
    monkeypatch.setattr(real_build, "CONTAINERD_MODULE_DIR", module)
    assert real_build.containerd_version() == "v2.4.2"
    after = {name: real_build.path(name) for name in real_build.FILES}
    assert {n for n in real_build.FILES if before[n] != after[n]} == {"containerd", "containerd-shim-runc-v2", "ctr"}


def test_a_change_of_corednss_plugins_moves_coredns_alone(cache, tmp_path, monkeypatch):
    before = {name: real_build.path(name) for name in real_build.FILES}
    module = tmp_path / "coredns-module"
    shutil.copytree(real_build.COREDNS_MODULE_DIR, module)
    main = module / "main.go"
    main.write_text(main.read_text().replace('\t_ "github.com/coredns/coredns/plugin/loop"\n', ""))
    monkeypatch.setattr(real_build, "COREDNS_MODULE_DIR", module)
    after = {name: real_build.path(name) for name in real_build.FILES}
    assert {n for n in real_build.FILES if before[n] != after[n]} == {"coredns"}


def _kubernetes_module_cached() -> bool:
    if not (shutil.which("go") and shutil.which("gcc")):
        return False
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    return (Path(modcache) / f"k8s.io/kubernetes@{build.kube_version()}" / "build" / "pause" / "linux" / "pause.c").is_file()


@pytest.mark.skipif(not _kubernetes_module_cached(), reason="needs go, gcc and the k8s.io/kubernetes module in Go's "
                                                            "module cache (the control plane's build downloads it)")
def test_the_pause_image_is_kubernetes_pause_static_from_scratch(cache, tmp_path):
    folder = real_build.group_dir("pause")
    folder.parent.mkdir(parents=True)
    real_build._build("pause", folder, say=lambda line: None)
    assert real_build.missing() == [n for n in real_build.FILES if n != real_build.PAUSE_ARCHIVE]
    with tarfile.open(real_build.path(real_build.PAUSE_ARCHIVE)) as archive:
        index = json.load(archive.extractfile("index.json"))
        entry = index["manifests"][0]
        assert entry["annotations"]["io.containerd.image.name"] == real_build.PAUSE_IMAGE
        blob = lambda d: archive.extractfile(f"blobs/sha256/{d.split(':')[1]}").read()  # noqa: E731
        manifest = json.loads(blob(entry["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        layer = blob(manifest["layers"][0]["digest"])
    assert config["config"] == {"Entrypoint": ["/pause"], "User": "65535:65535"}
    with tarfile.open(fileobj=io.BytesIO(layer)) as files:
        assert files.getnames() == ["pause"]
        program = files.extractfile("pause").read()
    # FROM scratch: nothing to load it, so it must be static (no ELF interpreter named in it).
    assert program[:4] == b"\x7fELF" and PT_INTERP not in program_headers(program)
    runnable = tmp_path / "pause"
    runnable.write_bytes(program)
    os.chmod(runnable, 0o755)
    done = subprocess.run([str(runnable), "-v"], capture_output=True, text=True, timeout=10)
    assert done.stdout == f"pause.c v{real_build.PAUSE_TAG}-pytorchjob-kit\n"
