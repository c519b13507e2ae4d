"""The sandbox (pause) image, built for real (gcc -static of the kubernetes module's pause.c) where
Go's module cache holds that module already, by the build table's one routine."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from generator.controlplane import build, pins

PT_INTERP = 3  # the program header naming a dynamic program's loader


def program_headers(elf: bytes) -> list[int]:
    """The type of each program header of a 64-bit little-endian ELF file."""
    offset, size, count = (int.from_bytes(elf[a:b], "little") for a, b in ((0x20, 0x28), (0x36, 0x38), (0x38, 0x3A)))
    return [int.from_bytes(elf[offset + i * size:offset + i * size + 4], "little") for i in range(count)]


def _kubernetes_module_cached() -> bool:
    if not (shutil.which("go") and shutil.which("gcc")):
        return False
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    return (Path(modcache) / f"k8s.io/kubernetes@{pins.kube_version()}" / "build" / "pause" / "linux" / "pause.c").is_file()


@pytest.mark.skipif(not _kubernetes_module_cached(), reason="needs go, gcc and the k8s.io/kubernetes module in Go's "
                                                            "module cache (the control plane's build downloads it)")
def test_the_pause_image_is_kubernetes_pause_static_from_scratch(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    archive_path = build.ensure(say=lambda line: None, groups=["pause"])[pins.PAUSE_ARCHIVE]
    node = build.part(node=True)
    assert build.missing(node) == [n for n in build.files(node) if n != pins.PAUSE_ARCHIVE]
    with tarfile.open(archive_path) as archive:
        index = json.load(archive.extractfile("index.json"))
        entry = index["manifests"][0]
        assert entry["annotations"]["io.containerd.image.name"] == pins.PAUSE_IMAGE
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
    assert done.stdout == f"pause.c v{pins.PAUSE_TAG}-pytorchjob-kit\n"
