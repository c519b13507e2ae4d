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
