"""The node mounts host folders only under the provisioner's folder: pods run as root here, so a
hostPath elsewhere (or a link that leads elsewhere) fails to mount, naming the one folder allowed."""
from __future__ import annotations

import pytest

from generator.controlplane.kubelet.volumes import MountError, Volumes


def volumes(tmp_path, *host: dict) -> Volumes:
    pod = {"metadata": {"name": "p", "namespace": "default"},
           "spec": {"volumes": [{"name": f"v{i}", "hostPath": h} for i, h in enumerate(host)]}}
    return Volumes(None, pod, tmp_path / "pod", tmp_path / "volumes")


@pytest.mark.parametrize("path", ["/etc", "/", "/root/.ssh", "{tmp}/volumes/../elsewhere", "{tmp}/volumes-not"])
def test_a_host_path_outside_the_provisioners_folder_is_refused(tmp_path, path):
    (tmp_path / "volumes").mkdir()
    path = path.format(tmp=tmp_path)
    with pytest.raises(MountError) as refused:
        volumes(tmp_path, {"path": path, "type": "DirectoryOrCreate"}).setup()
    assert f'hostPath volume "v0": "{path}" is outside {tmp_path / "volumes"}, the only host folder this node mounts' \
        in str(refused.value)
    assert "use a persistentVolumeClaim of the local-folder class, or emptyDir" in str(refused.value)
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "volumes-not").exists()  # nothing made


def test_a_link_inside_that_leads_outside_is_refused(tmp_path):
    (tmp_path / "volumes").mkdir()
    (tmp_path / "volumes" / "etc").symlink_to("/etc")
    with pytest.raises(MountError):
        volumes(tmp_path, {"path": str(tmp_path / "volumes" / "etc")}).setup()


def test_a_host_path_under_the_provisioners_folder_mounts(tmp_path):
    (tmp_path / "volumes").mkdir()
    mounted = volumes(tmp_path, {"path": str(tmp_path / "volumes" / "shared"), "type": "DirectoryOrCreate"}).setup()
    assert mounted == {"v0": tmp_path / "volumes" / "shared"} and mounted["v0"].is_dir()


def test_volume_files_are_born_with_their_mode_and_never_written_through_a_link(tmp_path, monkeypatch):
    import os
    import stat

    from generator.controlplane.kubelet import volumes as volumes_module

    folder = tmp_path / "pod" / "volumes" / "creds"
    folder.mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    (folder / "token").symlink_to(outside)  # left by a pod that can write its volume
    created = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, flags, mode=0o777, *a, **k: created.append(mode) or
                        real_open(path, flags, mode, *a, **k))
    volumes_module._write(folder, {"token": (b"s3cret", 0o400), "ca.crt": (b"CA", 0o644)})  # noqa: SLF001
    assert outside.read_text() == "not yours"
    assert (folder / "token").read_bytes() == b"s3cret" and not (folder / "token").is_symlink()
    assert stat.S_IMODE((folder / "token").stat().st_mode) == 0o400 and created == [0o400, 0o644]


def test_a_key_path_or_a_link_leading_out_of_the_volume_is_refused(tmp_path):
    from generator.controlplane.kubelet import volumes as volumes_module

    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "sub").symlink_to(tmp_path)
    for rel in ("../escape", "sub/escape"):
        with pytest.raises(MountError):
            volumes_module._write(folder, {rel: (b"x", 0o644)})  # noqa: SLF001
    assert not (tmp_path / "escape").exists()
