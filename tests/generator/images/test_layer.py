"""`--image REPO=DIR:PATH`: the folder DIR lands at PATH in the image that runs, work starting
there, for `run --container` and for `cluster up` alike, with a real podman and a tiny image of the
test's own making (imported, so nothing runs in it). Without PATH it lands at the code path."""
from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import uuid

import pytest

from generator.container import programs
from generator.controlplane import user_images
from generator.images import engine
from generator.local.backends.containers import images as container_images

pytestmark = pytest.mark.skipif(not shutil.which("podman"), reason="needs podman (generator image build installs it)")


@pytest.fixture
def own_image(tmp_path, monkeypatch):
    """(engine, REPO:TAG of a one-file image in the local store); every image made here removed after."""
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    eng = engine.get()
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "os-release").write_text("NAME=tiny\n")
    archive = tmp_path / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    name = f"localhost/pytorchjob-kit-test/own-{uuid.uuid4().hex[:8]}:1"
    eng.run("import", str(archive), name)
    made = [name]
    yield eng, name, made
    for image in made:
        eng.run("rmi", "--force", image, check=False)


def holds(eng, image: str) -> tuple[dict[str, str], str]:
    """The image's files under /opt and /workspace (path -> text), and its working directory."""
    config = json.loads(eng.run("image", "inspect", image).stdout)[0]["Config"]
    mounted = eng.run("image", "mount", image).stdout.strip()
    try:
        found = subprocess.run(["find", "opt", "workspace", "-type", "f"], cwd=mounted, capture_output=True,
                               text=True).stdout.split()
        files = {f"/{f}": open(f"{mounted}/{f}").read() for f in found}
    finally:
        eng.run("image", "unmount", image, check=False)
    return files, config.get("WorkingDir", "")


def code(tmp_path):
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "train.py").write_text("print('mine')\n")
    return folder


def test_run_container_lays_dir_at_path(own_image, tmp_path):
    eng, name, made = own_image
    repo, target = programs.mapping(f"{name}={code(tmp_path)}:/opt/app", [], tmp_path)
    made.append(container_images.layer(eng, name, target, "/workspace", repo, say=lambda _: None))
    assert holds(eng, made[-1]) == ({"/opt/app/train.py": "print('mine')\n"}, "/opt/app")


def test_cluster_up_lays_dir_at_path_and_without_path_at_the_code_path(own_image, tmp_path):
    eng, name, made = own_image
    folder = code(tmp_path)
    repo, target = programs.mapping(f"{name}={folder}:/opt/app", [], tmp_path)
    made.append(user_images.laid_over(eng, repo, target, {}, say=lambda _: None))
    assert holds(eng, made[-1]) == ({"/opt/app/train.py": "print('mine')\n"}, "/opt/app")
    repo, target = programs.mapping(f"{name}={folder}", [], tmp_path)
    made.append(user_images.laid_over(eng, repo, target, {}, say=lambda _: None))
    assert holds(eng, made[-1]) == ({f"{programs.CODE_PATH}/train.py": "print('mine')\n"}, programs.CODE_PATH)
