"""`cluster up` on the real node refuses early, with the figures and the fix, when the cluster's
folder has less room than the node will unpack: the images it pulls, sized from the registry's
manifests (each layer once), kept compressed and unpacked, plus the kubelet's eviction margin. The
filesystem is a small tmpfs of the test's own; the registry answers from the manifests it is given
(the real one's answers are e2e's: tests/e2e/test_images.py)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from generator.controlplane import disk
from generator.errors import UserError

TRAINER = "ghcr.io/pytorchjob-kit/trainer:0.1.0"
ALPINE = "docker.io/library/alpine:3.10"


class Holding:
    """A registry holding images of the given layers ({image: [(digest, size)]}), answering the
    distribution API's manifest and blob requests as the real one does."""

    def __init__(self, images: dict[str, list[tuple[str, int]]]):
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, bytes] = {}
        for image, layers in images.items():
            config = json.dumps({"config": {"Entrypoint": ["python"]}}).encode()
            digest = "sha256:" + hashlib.sha256(config).hexdigest()
            self.blobs[digest] = config
            repo, _, tag = image.partition("/")[2].rpartition(":")
            self.manifests[f"/v2/{repo}/manifests/{tag}"] = json.dumps({
                "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"digest": digest, "size": len(config)},
                "layers": [{"digest": d, "size": s} for d, s in layers]}).encode()

    def request(self, path: str, method: str = "GET", address: str = ""):
        if path in self.manifests:
            return 200, self.manifests[path], {}
        blob = self.blobs.get(path.rsplit("/", 1)[-1])
        return (200, blob, {}) if "/blobs/" in path and blob else (404, b'{"errors": []}', {})


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MB filesystem of the test's own (root, to mount it)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    folder = tmp_path / "fs"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_too_little_room_for_what_the_node_unpacks_is_refused_with_the_figures_and_the_fix(small_fs):
    reg = Holding({TRAINER: [("sha256:" + "a" * 64, 1_700_000), ("sha256:" + "b" * 64, 500_000)],
                   ALPINE: [("sha256:" + "b" * 64, 500_000)]})  # a layer the trainer shares: counted once
    with pytest.raises(UserError) as refused:
        disk.check(small_fs / "cluster", reg, [TRAINER, ALPINE, "docker.io/library/not-held:1"])
    message = str(refused.value)
    assert message.startswith(f"{small_fs / 'cluster'} is on a filesystem with 4.2 MB free, and the node will unpack "
                              "at least 4.4 MB there (the 3 images it pulls, 2.2 MB compressed, each kept compressed "
                              "and unpacked) and keep 0.0 MB free (1% of the filesystem: below that the kubelet evicts "
                              "pods): free 0.2 MB or more"), message
    assert "`python -m generator cluster down --purge --dir DIR`" in message


def test_room_enough_passes_and_an_image_the_registry_lacks_adds_nothing(small_fs):
    reg = Holding({TRAINER: [("sha256:" + "a" * 64, 1_000_000)]})
    disk.check(small_fs / "cluster", reg, [TRAINER, "docker.io/library/not-held:1"])
    disk.check(small_fs / "cluster", Holding({}), [TRAINER])


def test_the_node_pulls_the_operators_images_as_the_values_name_them_and_the_trainers():
    images = disk.pulled({"pytorchInitContainerImage": "busybox:1.36"}, True, ["registry.example.com/ml/toy:latest"])
    assert {"docker.io/library/busybox:1.36", "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
            "registry.example.com/ml/toy:latest"} <= set(images)
    assert any(i.startswith("ghcr.io/pytorchjob-kit/trainer:") for i in images)
    assert "docker.io/library/alpine:3.10" not in images  # the values replaced it
