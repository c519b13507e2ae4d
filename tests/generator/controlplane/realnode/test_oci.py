"""The OCI image archive the real node imports (its pause image, a test's program): a valid
image layout whose digests name their blobs, the same bytes for the same files."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile

from generator.controlplane.realnode import oci

IMAGE = oci.Image("localhost/pytorchjob-kit/pause:3.10.2", {"pause": (b"\x7fELF-not-really", 0o755)}, ("/pause",),
                  "65535:65535")


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def read(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.extractfile(name).read()


def blob(data: bytes, descriptor: dict) -> bytes:
    content = read(data, f"blobs/sha256/{descriptor['digest'].split(':')[1]}")
    assert len(content) == descriptor["size"]
    assert "sha256:" + hashlib.sha256(content).hexdigest() == descriptor["digest"]
    return content


def test_the_archive_is_an_image_layout_named_as_containerd_imports_it():
    data = oci.archive(IMAGE)
    assert json.loads(read(data, "oci-layout")) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(read(data, "index.json"))
    (entry,) = index["manifests"]
    assert entry["mediaType"] == oci.MANIFEST
    assert entry["annotations"] == {"io.containerd.image.name": "localhost/pytorchjob-kit/pause:3.10.2",
                                    "org.opencontainers.image.ref.name": "3.10.2"}
    manifest = json.loads(blob(data, entry))
    config = json.loads(blob(data, manifest["config"]))
    assert (config["os"], config["architecture"]) == ("linux", oci.architecture())
    assert config["config"] == {"Entrypoint": ["/pause"], "User": "65535:65535"}
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == oci.LAYER
    content = blob(data, layer)
    # An uncompressed layer's diff ID is its own digest.
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer["digest"]]}
    files = members(content)
    assert list(files) == ["pause"] and files["pause"].mode == 0o755 and files["pause"].uid == 0
    assert read(content, "pause") == b"\x7fELF-not-really"


def test_the_same_files_give_the_same_bytes():
    assert oci.archive(IMAGE) == oci.archive(IMAGE)
    other = oci.Image(IMAGE.name, {"pause": (b"other", 0o755)}, IMAGE.entrypoint, IMAGE.user)
    assert oci.archive(other) != oci.archive(IMAGE)


def test_an_untagged_name_is_latest_and_no_user_means_the_images_default():
    image = oci.Image("localhost:5000/probe", {"probe": (b"x", 0o755)}, ("/probe",))
    data = oci.archive(image)
    entry = json.loads(read(data, "index.json"))["manifests"][0]
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "latest"
    config = json.loads(blob(data, json.loads(blob(data, entry))["config"]))
    assert config["config"] == {"Entrypoint": ["/probe"]}
