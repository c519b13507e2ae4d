"""The node mounts host folders only under the provisioner's folder: pods may run as root here, so a
hostPath elsewhere (or a link that leads elsewhere) fails to mount, naming the one folder allowed.
Volume files are born with their modes, and fsGroup owns them as a kubelet sets it."""
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


def test_fs_group_owns_the_pods_volumes_as_a_kubelet_sets_it(tmp_path):
    import os
    import stat

    from generator.controlplane.kubelet import volumes as volumes_module

    if os.geteuid() != 0:
        pytest.skip("chown to another group needs root")
    claim = tmp_path / "volumes" / "pvc-1"
    (claim / "old").mkdir(parents=True)
    (claim / "old" / "model.pt").write_text("x")
    from types import SimpleNamespace as NS

    core = NS(read_namespaced_persistent_volume_claim=lambda name, ns: NS(
                  status=NS(phase="Bound"), spec=NS(volume_name="pvc-1")),
              read_persistent_volume=lambda name: NS(metadata=NS(name=name),
                                                     spec=NS(host_path=NS(path=str(claim)), local=None)))
    pod = {"metadata": {"name": "p", "namespace": "default"},
           "spec": {"securityContext": {"fsGroup": 4000},
                    "volumes": [{"name": "scratch", "emptyDir": {}},
                                {"name": "data", "persistentVolumeClaim": {"claimName": "out"}}]}}
    mounted = Volumes(core, pod, tmp_path / "pod", tmp_path / "volumes").setup()
    scratch = mounted["scratch"].stat()
    assert (scratch.st_gid, stat.S_IMODE(scratch.st_mode)) == (4000, 0o2777)  # any user writes; the group passes on
    for path in (claim, claim / "old"):
        assert path.stat().st_gid == 4000 and stat.S_IMODE(path.stat().st_mode) & 0o2070 == 0o2070
    assert (claim / "old" / "model.pt").stat().st_gid == 4000
    assert stat.S_IMODE((claim / "old" / "model.pt").stat().st_mode) & 0o060 == 0o060
    # A Secret's files keep their defaultMode, plus read for the group, and belong to it.
    keys = tmp_path / "pod" / "volumes" / "token"
    volumes_module._write(keys, {"token": (b"t", 0o600), "ca.crt": (b"c", 0o644)}, group=4000)  # noqa: SLF001
    modes = {p.name: (p.stat().st_gid, stat.S_IMODE(p.stat().st_mode)) for p in keys.iterdir()}
    assert modes == {"token": (4000, 0o640), "ca.crt": (4000, 0o644)}


def test_without_fs_group_an_empty_dir_is_writable_by_any_user_and_files_keep_their_mode(tmp_path):
    import stat

    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]}}
    mounted = Volumes(None, pod, tmp_path / "pod", tmp_path / "volumes").setup()
    assert stat.S_IMODE(mounted["scratch"].stat().st_mode) == 0o777


def claimed(tmp_path, host_path: str, fs_group: int | None = None) -> Volumes:
    """A pod with one claim, bound to a PersistentVolume whose host path is `host_path`."""
    from types import SimpleNamespace as NS

    core = NS(read_namespaced_persistent_volume_claim=lambda name, ns: NS(
                  status=NS(phase="Bound"), spec=NS(volume_name="pv-1")),
              read_persistent_volume=lambda name: NS(metadata=NS(name=name),
                                                     spec=NS(host_path=NS(path=host_path), local=None)))
    context = {"securityContext": {"fsGroup": fs_group}} if fs_group is not None else {}
    pod = {"metadata": {"name": "p", "namespace": "default"},
           "spec": {**context, "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "out"}}]}}
    return Volumes(core, pod, tmp_path / "pod", tmp_path / "volumes")


@pytest.mark.parametrize("path", ["/etc", "{tmp}/volumes/../outside", "{tmp}/volumes/link"])
def test_a_claims_volume_whose_host_path_lies_outside_the_provisioners_folder_fails_to_mount(tmp_path, path):
    (tmp_path / "volumes").mkdir()
    (tmp_path / "volumes" / "link").symlink_to("/etc")
    path = path.format(tmp=tmp_path)
    with pytest.raises(MountError) as refused:
        claimed(tmp_path, path).setup()
    assert f'persistentvolume "pv-1": "{path}" is outside {tmp_path / "volumes"}, the only host folder this node mounts' \
        in str(refused.value)
    assert not (tmp_path / "outside").exists()


def test_fs_group_never_changes_a_file_a_link_swapped_in_during_the_walk_points_to(tmp_path, monkeypatch):
    import os
    import stat

    from generator.controlplane.kubelet import volumes as volumes_module

    if os.geteuid() != 0:
        pytest.skip("chown to another group needs root")
    claim = tmp_path / "volumes" / "pvc-1"
    claim.mkdir(parents=True)
    (claim / "model.pt").write_text("x")
    outside = tmp_path / "shadow"
    outside.write_text("root's")
    outside.chmod(0o600)
    swapped = []

    def racing(change):  # the pod's other container swaps the file for a link just as the walk reaches it
        def run(target, *args, **kwargs):
            if not swapped and (getattr(target, "name", None) == "model.pt" or isinstance(target, int)):
                if (claim / "model.pt").exists() and not (claim / "model.pt").is_symlink():
                    swapped.append(True)
                    (claim / "model.pt").unlink()
                    (claim / "model.pt").symlink_to(outside)
            return change(target, *args, **kwargs)
        return run

    for name in ("chown", "fchown"):
        monkeypatch.setattr(volumes_module.os, name, racing(getattr(os, name)))
    claimed(tmp_path, str(claim), fs_group=4000).setup()
    assert swapped
    assert (outside.stat().st_gid, stat.S_IMODE(outside.stat().st_mode)) == (0, 0o600)
