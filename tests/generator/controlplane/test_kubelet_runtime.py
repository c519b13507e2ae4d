"""Containers started as the process node starts them, for real: a private mount and UTS
namespace with the pod's hostname, its /etc/hosts and its volumes at their mountPaths, or, for
the trainer, volume paths written into its command line and env."""
from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from generator.container import programs as images
from generator.controlplane.kubelet import runtime

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the node makes each container's namespaces")


def run(program, container, volumes, tmp_path, env=None) -> tuple[int, list[str]]:
    lines: list[str] = []
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\tlocalhost\n127.0.0.1\tjob-master-0 job-master-0.default.svc\n")
    toolbox = tmp_path / "toolbox"
    toolbox.mkdir(exist_ok=True)
    (toolbox / "hello").write_text("#!/bin/sh\necho hello from the toolbox\n")
    (toolbox / "hello").chmod(0o755)
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", **(env or {})}
    proc = runtime.start(program, container, base, volumes, "job-worker-0", hosts, tmp_path / "workdir", toolbox,
                         None, lines.append)
    code = proc.wait(60)
    proc.reader.join(5)
    return code, lines


def test_a_shell_container_sees_its_hostname_hosts_and_volumes_where_it_mounts_them(tmp_path):
    config = tmp_path / "volumes" / "config"
    config.mkdir(parents=True)
    (config / "mode").write_text("fast")
    scratch = tmp_path / "volumes" / "scratch"
    scratch.mkdir()
    marker = Path("/tmp") / f"host-only-{os.getpid()}"
    marker.write_text("x")
    try:
        code, lines = run(images.of("shell"), {"name": "sh", "command": ["sh", "-c", (
            "hostname; getent hosts job-master-0; cat /tmp/config/mode; echo; echo data > /var/run/scratch/out; "
            f"test -e {marker} && echo host-tmp-visible || echo host-tmp-hidden; "
            "(echo x > /tmp/config/new) 2>/dev/null && echo writable || echo read-only; hello")],
            "volumeMounts": [{"name": "config", "mountPath": "/tmp/config", "readOnly": True},
                             {"name": "scratch", "mountPath": "/var/run/scratch"}]},
            {"config": config, "scratch": scratch}, tmp_path)
    finally:
        marker.unlink()
    assert code == 0, lines
    assert lines == ["job-worker-0", "127.0.0.1       job-master-0 job-master-0.default.svc", "fast", "host-tmp-hidden",
                     "read-only", "hello from the toolbox"]
    assert (scratch / "out").read_text() == "data\n"  # the volume is the folder
    assert not (config / "new").exists()


def test_the_trainer_gets_volume_paths_as_folders_and_its_own_output_folder(tmp_path):
    data = tmp_path / "claim"
    data.mkdir()
    code, lines = run(images.of("trainer"), {"name": "pytorch", "command": ["python", "-c",
                      "import os, sys; print(sys.argv[1]); print(os.environ['DATA']); print(os.environ['OUTPUT_DIR'])",
                      "--data=/mnt/data/x"],
                      "volumeMounts": [{"name": "claim", "mountPath": "/mnt/data"}]},
                      {"claim": data}, tmp_path, env={"DATA": "/mnt/data", "OUTPUT_DIR": "/opt/pytorch/output"})
    assert code == 0, lines
    assert lines == [f"--data={data}/x", str(data), str(tmp_path / "output")]  # never /opt on this machine


def test_a_mount_point_this_machine_cannot_make_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(runtime.StartError, match='mountPath "/nonexistent/config" is not a folder on this machine'):
        run(images.of("shell"), {"name": "sh", "command": ["true"],
                                 "volumeMounts": [{"name": "v", "mountPath": "/nonexistent/config"}]},
            {"v": tmp_path}, tmp_path)


def test_stop_sends_sigterm_then_sigkill_to_the_whole_group(tmp_path):
    lines: list[str] = []
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    proc = runtime.start(images.of("shell"), {"name": "sh", "command": ["sh", "-c", "trap 'echo TERM' TERM; "
                                                                        "echo up; while :; do sleep 0.1; done"]},
                         {"PATH": "/usr/bin:/bin"}, {}, "p", hosts, tmp_path / "w", tmp_path, None, lines.append)
    while not lines:
        threading.Event().wait(0.05)
    assert proc.stop(1.0) == 137
    assert lines[0] == "up" and "TERM" in lines  # its trap ran: SIGTERM came first


def test_a_sub_path_that_a_link_leads_out_of_the_volume_is_refused_before_anything_runs(tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "out").symlink_to("/etc")  # written by an earlier container of the pod
    with pytest.raises(runtime.StartError, match='subPath "out" of volumeMount "v" leads out of the volume'):
        run(images.of("shell"), {"name": "sh", "command": ["true"],
                                 "volumeMounts": [{"name": "v", "mountPath": "/var/run/x", "subPath": "out"}]},
            {"v": volume}, tmp_path)


def test_your_code_folder_is_mounted_read_only_where_the_image_holds_it_and_the_container_starts_there(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "hello.py").write_text("import sys; print('hello from', sys.argv[0])\n")
    at = str(tmp_path / "image" / "app")  # where the image keeps its code: made, empty, on this machine
    program = images.resolve("registry.example.com/ml/toy:1", {"registry.example.com/ml/toy": f"{project}:{at}"})
    code, lines = run(program, {"name": "pytorch", "command": ["sh", "-c", (
        f"pwd; python {at}/hello.py; (echo x > written) 2>/dev/null && echo writable || echo read-only")]},
        {}, tmp_path, env=program.env())
    assert code == 0, lines
    assert lines == [at, f"hello from {at}/hello.py", "read-only"]
    assert list(Path(at).iterdir()) == [] and sorted(p.name for p in project.iterdir()) == ["hello.py"]


def test_your_image_without_a_command_is_refused_before_anything_runs(tmp_path):
    program = images.resolve("registry.example.com/ml/toy:1", {"registry.example.com/ml/toy": "host"})
    with pytest.raises(runtime.StartError, match=r"container pytorch sets no command, and this machine does not know "
                                                 r"the image's ENTRYPOINT \(registry.example.com/ml/toy runs as this "
                                                 r"machine's python, torchrun, bash and sh\); write the command"):
        run(program, {"name": "pytorch", "args": ["--epochs", "1"]}, {}, tmp_path)


def test_a_path_this_machine_lacks_that_the_command_names_is_mounted_in_the_containers_own_run(tmp_path):
    # The runtimes installer of Trainer's chart: a ConfigMap at /manifests, named inside its script;
    # and a key of it mounted by subPath as a file at the root, as the controllers' config is.
    manifests = tmp_path / "volumes" / "manifests"
    manifests.mkdir(parents=True)
    (manifests / "runtimes.yaml").write_text("kind: ClusterTrainingRuntime\n")
    code, lines = run(images.of("shell"), {"name": "apply", "command": ["sh", "-c", (
        "cat /manifests/runtimes.yaml; cat /runtimes.yaml; echo /manifests-other")],
        "volumeMounts": [{"name": "m", "mountPath": "/manifests", "readOnly": True},
                         {"name": "m", "mountPath": "/runtimes.yaml", "subPath": "runtimes.yaml"}]},
        {"m": manifests}, tmp_path)
    assert code == 0, lines
    assert lines == ["kind: ClusterTrainingRuntime", "kind: ClusterTrainingRuntime", "/manifests-other"]
    assert not Path("/manifests").exists() and not Path("/runtimes.yaml").exists()  # nothing made on this machine


def test_apk_add_finds_what_the_toolbox_holds_and_refuses_the_rest(tmp_path):
    from generator.controlplane import kubelet

    toolbox = tmp_path / "toolbox"  # the node's, on a shell image's PATH
    toolbox.mkdir()
    for name, text in (("apk", kubelet.APK), ("kubectl", "#!/bin/sh\necho kubectl\n")):
        (toolbox / name).write_text(text)
        (toolbox / name).chmod(0o755)
    code, lines = run(images.of("shell"), {"name": "i", "command": [
        "sh", "-c", "apk add --no-cache kubectl && kubectl && apk add --no-cache jq; echo $?"]}, {}, tmp_path)
    assert code == 0, lines
    assert lines[1] == "kubectl" and lines[-1] == "1"
    assert any("unable to select packages: jq" in line for line in lines)


@pytest.mark.parametrize(("mount", "says"), [
    ({"mountPath": "/var/run/../../etc/x"}, 'mountPath of volumeMount "v" is "/var/run/../../etc/x", which contains ".."'),
    ({"mountPath": "/var/run/x", "subPath": "a/../../b"}, 'subPath "a/../../b" of volumeMount "v" contains ".."'),
    ({"mountPath": "//"}, 'mountPath "//" of volumeMount "v" would cover /, which this node needs'),
    ({"mountPath": "/proc/sys"}, 'mountPath "/proc/sys" of volumeMount "v" would cover /proc'),
])
def test_a_mount_path_or_sub_path_that_climbs_out_or_covers_what_the_node_needs_is_refused(tmp_path, mount, says):
    volume = tmp_path / "volume"
    volume.mkdir()
    with pytest.raises(runtime.StartError, match=re.escape(says)):
        run(images.of("shell"), {"name": "sh", "command": ["true"], "volumeMounts": [{"name": "v", **mount}]},
            {"v": volume}, tmp_path)
    assert list(volume.iterdir()) == [] and not (tmp_path / "b").exists()


def test_a_working_dir_that_climbs_out_of_the_pods_folder_is_refused_before_anything_is_made(tmp_path):
    with pytest.raises(runtime.StartError, match=re.escape('container pytorch: workingDir is "/../../../../x", which '
                                                           'contains ".."')):
        run(images.of("trainer"), {"name": "pytorch", "command": ["python", "-c", "pass"],
                                   "workingDir": "/../../../../x"}, {}, tmp_path)
    assert not (tmp_path / "x").exists() and not (tmp_path / "workdir").exists()


def test_a_built_controllers_mount_point_this_machine_lacks_is_made_as_an_image_has_it(tmp_path, monkeypatch):
    # Kueue writes its visibility API's certificate to /visibility, a path in its code, mounted from an emptyDir;
    # here a folder of the test's stands for it.
    parent = Path("/var/tmp") / f"pytorchjob-kit-mount-{os.getpid()}"
    parent.mkdir()
    target = parent / "visibility"
    monkeypatch.setitem(runtime.MADE_MOUNT_POINTS, "kueue", (str(target),))
    manager = tmp_path / "manager"
    manager.write_text(f"#!/bin/sh\necho written > {target}/tls.crt && echo ok\n")
    manager.chmod(0o755)
    volume = tmp_path / "visibility"
    volume.mkdir()
    program = images.Program("kueue", "example.com/kueue", images.PRIVATE, ("/manager",), binary=manager)
    try:
        code, lines = run(program, {"name": "manager", "command": ["/manager"],
                                    "volumeMounts": [{"name": "visibility", "mountPath": str(target)}]},
                          {"visibility": volume}, tmp_path)
        assert (code, lines) == (0, ["ok"])
        assert (volume / "tls.crt").read_text() == "written\n"  # into the volume, not this machine's folder
        assert target.is_dir() and not any(target.iterdir())
    finally:
        shutil.rmtree(parent)
    # A shell image (this machine's sh) gets no such folder made for it, and the controller's image
    # none but its own: a pod naming that image must not make folders here as root where it likes.
    with pytest.raises(runtime.StartError, match="is not a folder on this machine"):
        run(images.of("shell"), {"name": "sh", "command": ["true"],
                                 "volumeMounts": [{"name": "v", "mountPath": str(target)}]}, {"v": volume}, tmp_path)
    elsewhere = Path("/var/tmp") / f"pytorchjob-kit-nologin-{os.getpid()}"  # not under a private root such as /tmp
    with pytest.raises(runtime.StartError, match="is not a folder on this machine"):
        run(program, {"name": "manager", "command": ["/manager"],
                      "volumeMounts": [{"name": "v", "mountPath": str(elsewhere)}]}, {"v": volume}, tmp_path)
    assert not elsewhere.exists() and not target.exists()
