"""A container's securityContext as the process node applies it: who it runs as, what it may do,
what it sees of the cluster's folder, and the runAsNonRoot refusal a kubelet gives. The last
tests start real containers (as root)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from generator.container import programs as images
from generator.controlplane.kubelet import runtime, security

POD = "job-master-0_default(u1)"
SHELL, TRAINER = images.of("shell"), images.of("trainer")


def test_no_security_context_runs_as_the_node_always_did():
    assert security.identity({}, {"name": "c"}, SHELL, POD) is None
    assert security.unhonoured({}, {"name": "c"}) == []


def test_the_containers_fields_win_over_the_pods_and_groups_come_from_fs_group_and_supplemental_groups():
    pod = {"securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000, "supplementalGroups": [3000]}}
    got = security.identity(pod, {"name": "c", "securityContext": {"runAsUser": 1500}}, SHELL, POD)
    assert (got.uid, got.gid, got.groups) == (1500, 1000, (2000, 3000))
    assert got.spec() == {"uid": 1500, "gid": 1000, "groups": [2000, 3000], "drop": [], "no_new_privs": False}


@pytest.mark.parametrize(("context", "gid"), [
    ({"runAsUser": 2000}, 2000),  # the user's own group, never root's
    ({"runAsUser": 1000, "runAsGroup": 0}, 0),  # asked for: given
    ({"runAsUser": TRAINER.user[0]}, TRAINER.user[1]),  # the image's own user keeps the image's group
    ({}, TRAINER.user[1]),
])
def test_run_as_user_without_run_as_group_gets_a_group_of_its_own_not_root(context, gid):
    got = security.identity({"securityContext": {"runAsNonRoot": True, **context}}, {"name": "c"}, TRAINER, POD)
    assert got.gid == gid


def test_capabilities_no_new_privs_and_a_read_only_root_become_what_the_container_starts_with():
    sc = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
          "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
    got = security.identity({}, {"name": "c", "securityContext": sc}, SHELL, POD)
    assert got.read_only_root and got.uid == 0
    every_but_net_bind_service = [c for c in range(len(security.CAPABILITIES)) if c != 10]
    assert got.spec() == {"uid": 0, "gid": 0, "groups": [], "drop": every_but_net_bind_service, "no_new_privs": True}
    some = security.identity({}, {"name": "c", "securityContext": {"capabilities": {"drop": ["CAP_NET_RAW", "chown"]}}},
                             SHELL, POD)
    assert some.dropped() == [0, 13]  # chown, net_raw


def test_a_capability_linux_does_not_have_is_refused_naming_it():
    with pytest.raises(security.CapabilityError, match='names "net_rw", which is not a Linux capability'):
        security.identity({}, {"name": "c", "securityContext": {"capabilities": {"drop": ["NET_RW"]}}}, SHELL, POD)


@pytest.mark.parametrize(("pod", "container", "message"), [
    ({"runAsNonRoot": True, "runAsUser": 0}, {}, "container's runAsUser breaks non-root policy"),
    ({"runAsNonRoot": True}, {}, "container has runAsNonRoot and image will run as root"),
    ({}, {"runAsNonRoot": True, "runAsUser": 0}, "container's runAsUser breaks non-root policy"),
])
def test_run_as_non_root_with_a_root_user_is_refused_as_a_kubelet_refuses_it(pod, container, message):
    with pytest.raises(security.NonRootError, match=message) as err:
        security.identity({"securityContext": pod}, {"name": "sh", "securityContext": container}, SHELL, POD)
    assert f'(pod: "{POD}", container: sh)' in str(err.value)


def test_run_as_non_root_passes_on_the_trainer_image_whose_user_is_not_root():
    got = security.identity({"securityContext": {"runAsNonRoot": True}}, {"name": "pytorch"}, TRAINER, POD)
    assert (got.uid, got.gid) == TRAINER.user == images.image_user(Path("trainer/Dockerfile")) != (0, 0)


def test_fields_this_node_cannot_apply_are_named():
    pod = {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "runAsUser": 1000}}
    container = {"securityContext": {"seLinuxOptions": {"level": "s0"}, "capabilities": {"add": ["NET_ADMIN"]}}}
    assert security.unhonoured(pod, container) == ["spec.securityContext.seccompProfile",
                                                   "securityContext.seLinuxOptions",
                                                   "securityContext.capabilities.add (for a non-root user)"]


# --- real containers --------------------------------------------------------------------------
needs_tools = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


@pytest.fixture
def cluster():
    """A cluster folder as `cluster up` makes it (0700) with two pods' folders, outside /tmp (whose
    pytest folder is 0700 and would keep any other user out on its own)."""
    base = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="pjk-security-"))
    base.chmod(0o755)
    root = base / "cluster"
    root.mkdir(mode=0o700)
    pods = root / "kubelet" / "pods"
    mine, other = pods / "default_mine_1", pods / "default_other_2"
    for folder in (mine, other):
        (folder / "volumes" / "token").mkdir(parents=True)
        (folder / "volumes" / "token" / "token").write_text(f"secret of {folder.name}")
        (folder / "volumes" / "token" / "token").chmod(0o644)
        (folder / "workdir").mkdir()
    (mine / "hosts").write_text("127.0.0.1 localhost\n")
    (root / "pki").mkdir()
    (root / "pki" / "ca.key").write_text("the CA key")
    yield root, mine, other
    shutil.rmtree(base)


def start(program, container, root: Path, mine: Path, identity=None) -> tuple[int, list[str]]:
    lines: list[str] = []
    volumes = {"token": mine / "volumes" / "token"}
    proc = runtime.start(program, container, {"PATH": "/usr/local/bin:/usr/bin:/bin"}, volumes, "mine",
                         mine / "hosts", mine / "workdir", mine, None, lines.append, identity=identity,
                         hidden=runtime.Hidden(root, (mine,)))
    code = proc.wait(60)
    proc.reader.join(5)
    return code, lines


@needs_tools
def test_a_container_sees_its_own_token_but_no_other_pods_and_none_of_the_clusters_keys(cluster):
    root, mine, other = cluster
    read = ("import sys\nfor p in sys.argv[1:]:\n    try: print(open(p).read())\n"
            "    except OSError as e: print(type(e).__name__)")
    code, lines = start(TRAINER, {"name": "pytorch", "command": ["python", "-c", read, "/var/run/secrets/token",
                                                                 str(other / "volumes/token/token"),
                                                                 str(root / "pki/ca.key")],
                                  "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets"}]}, root, mine)
    assert code == 0, lines
    # Root in the container (no securityContext) and still: only its own pod's folder is there.
    assert lines == [f"secret of {mine.name}", "FileNotFoundError", "FileNotFoundError"]


@needs_tools
def test_a_non_root_container_runs_as_its_user_without_capabilities_and_with_a_read_only_root(cluster):
    root, mine, _ = cluster
    (mine / "volumes" / "scratch").mkdir(mode=0o777)
    (mine / "volumes" / "scratch").chmod(0o777)
    pod = {"securityContext": {"runAsUser": 65534, "runAsGroup": 65534, "fsGroup": 4000}}
    container = {"name": "sh", "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                   "capabilities": {"drop": ["ALL"]}},
                 "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets", "readOnly": True}],
                 "command": ["sh", "-c", "id -u; id -G; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; "
                                         "cat /var/run/secrets/token; echo; "
                                         "(: > /etc/pjk-probe) 2>/dev/null && echo root-writable || echo root-read-only; "
                                         "(: > /tmp/x) 2>/dev/null && echo tmp-writable || echo tmp-read-only"]}
    identity = security.identity(pod, container, SHELL, POD)
    code, lines = start(SHELL, container, root, mine, identity)
    assert code == 0, lines
    assert lines == ["65534", "65534 4000", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
                     "NoNewPrivs:\t1", f"secret of {mine.name}", "root-read-only", "tmp-read-only"]
    assert not Path("/etc/pjk-probe").exists()


@needs_tools
def test_a_trainer_whose_python_its_user_cannot_reach_is_refused_with_the_reason(cluster, tmp_path):
    root, mine, _ = cluster
    hidden = tmp_path / "home"
    hidden.mkdir(mode=0o700)  # the code's own folder: no other user may read it
    identity = security.identity({"securityContext": {"runAsUser": 1000}}, {"name": "pytorch"}, TRAINER, POD)
    with pytest.raises(runtime.StartError, match="cannot be read by uid 1000, the container's runAsUser"):
        runtime.start(TRAINER, {"name": "pytorch", "command": ["python", "-c", "pass"]},
                      {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(hidden)}, {}, "mine", mine / "hosts",
                      mine / "workdir", mine, None, print, identity=identity)


@needs_tools
def test_a_non_root_trainer_writes_its_own_folders_though_the_folders_above_them_are_0700(cluster):
    root, mine, _ = cluster
    root.parent.chmod(0o700)  # as pytest's own folder, or a checkout under a private home
    output = mine / "output"
    output.mkdir()
    os.chown(output, 1000, 1000)
    identity = security.identity({"securityContext": {"runAsUser": 1000, "runAsGroup": 1000}}, {"name": "pytorch"},
                                 TRAINER, POD)
    lines: list[str] = []
    write = "import os, sys; open(os.path.join(sys.argv[1], 'model.pt'), 'w').write('x'); print(os.getuid())"
    proc = runtime.start(TRAINER, {"name": "pytorch", "command": ["python", "-c", write, str(output)]},
                         {"PATH": "/usr/bin:/bin"}, {}, "mine", mine / "hosts", mine / "workdir", mine, None,
                         lines.append, identity=identity, hidden=runtime.hidden(root, [mine], identity))
    assert proc.wait(60) == 0, lines
    proc.reader.join(5)
    assert lines == ["1000"] and (output / "model.pt").read_text() == "x"


@needs_tools
def test_a_non_root_trainer_runs_code_that_lies_under_a_folder_it_cannot_pass(cluster):
    root, mine, _ = cluster
    home = root.parent / "home"
    code = home / "me" / "checkout"
    code.mkdir(parents=True)
    home.chmod(0o700)  # a private home; the checkout itself is readable by all
    # A child of the interpreter too, as torchrun starts its workers: exec'd by the user itself.
    (code / "hello.py").write_text("import os, subprocess, sys\nprint('hello as', os.getuid(), flush=True)\n"
                                   "subprocess.run([sys.executable, '-c', 'print(\"child ran\")'], check=True)\n")
    identity = security.identity({"securityContext": {"runAsUser": 1000}}, {"name": "pytorch"}, TRAINER, POD)
    lines: list[str] = []
    proc = runtime.start(TRAINER, {"name": "pytorch", "command": ["python", "-m", "hello"]},
                         {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code)}, {}, "mine", mine / "hosts", mine / "workdir",
                         mine, None, lines.append, identity=identity, hidden=runtime.hidden(root, [mine], identity))
    assert proc.wait(60) == 0, lines
    proc.reader.join(5)
    assert lines == ["hello as 1000", "child ran"]


HELPERS = ("nsenter", "unshare", "sh", "mount", "mkdir", "touch", "setpriv", "env", "printf", "python3", "id", "true")


@needs_tools
def test_no_program_on_the_pods_path_runs_as_root_while_the_node_sets_the_container_up(cluster):
    root, mine, _ = cluster
    fakes = root.parent / "fakes"  # a folder the pod can write (its emptyDir, the host's /tmp)
    fakes.mkdir(mode=0o777)
    fakes.chmod(0o777)
    for name in HELPERS:
        (fakes / name).write_text(f"#!/bin/sh\necho \"{name} $(/usr/bin/id -u)\" >> {fakes}/ran\n")
        (fakes / name).chmod(0o755)
    pod = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}
    container = {"name": "sh", "command": ["true"], "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets", "readOnly": True}]}
    lines: list[str] = []
    proc = runtime.start(SHELL, container, {"PATH": f"{fakes}:/usr/bin:/bin"}, {"token": mine / "volumes" / "token"},
                         "mine", mine / "hosts", mine / "workdir", mine, None, lines.append,
                         identity=security.identity(pod, container, SHELL, POD), hidden=runtime.Hidden(root, (mine,)))
    assert proc.wait(60) == 0, lines
    proc.reader.join(5)
    # Only the container's own program came from its PATH, and ran as its user.
    assert (fakes / "ran").read_text() == "true 1000\n"


@needs_tools
def test_a_sub_path_swapped_for_a_link_after_the_check_is_refused_not_followed(cluster, monkeypatch):
    root, mine, _ = cluster
    volume = mine / "volumes" / "scratch"
    (volume / "data").mkdir(parents=True)
    checked = runtime.prepare

    def racing(*args, **kwargs):  # another container of the pod, writing the same volume at the worst moment
        ready = checked(*args, **kwargs)
        (volume / "data").rename(volume / "data.old")
        (volume / "data").symlink_to(root / "pki")
        return ready

    monkeypatch.setattr(runtime, "prepare", racing)
    lines: list[str] = []
    proc = runtime.start(SHELL, {"name": "sh", "command": ["sh", "-c", "cat /var/run/x/ca.key"],
                                 "volumeMounts": [{"name": "scratch", "mountPath": "/var/run/x", "subPath": "data"}]},
                         {"PATH": "/usr/bin:/bin"}, {"scratch": volume}, "mine", mine / "hosts", mine / "workdir", mine,
                         None, lines.append, hidden=runtime.Hidden(root, (mine,)))
    assert proc.wait(60) == 128
    proc.reader.join(5)
    assert lines == [f"the process node could not set up the container: cannot mount {volume / 'data'}: Too many levels "
                     "of symbolic links (a link inside a volume is not followed)"]


@needs_tools
def test_a_volume_mounted_over_the_nodes_programs_only_ever_runs_as_the_containers_user(cluster):
    root, mine, _ = cluster
    tools = mine / "volumes" / "tools"
    tools.mkdir(parents=True, mode=0o777)
    tools.chmod(0o777)
    shutil.copy("/bin/dash", tools / "dash")  # the fakes' own shell: /bin is the volume now
    who = 'while read -r key value rest; do [ "$key" = Uid: ] && echo "{name} $value" >> {log}; done < /proc/self/status\nexit 0\n'
    for name in ("mount", "mkdir", "touch", "setpriv", "env", "python3", "sh", "true"):
        (tools / name).write_text(f"#!{tools}/dash\n" + who.format(name=name, log=tools / "ran"))
        (tools / name).chmod(0o755)
    pod = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}
    container = {"name": "sh", "command": ["true"], "securityContext": {"capabilities": {"drop": ["ALL"]}},
                 "volumeMounts": [{"name": "tools", "mountPath": "/usr/bin", "readOnly": True}]}
    lines: list[str] = []
    proc = runtime.start(SHELL, container, {"PATH": "/usr/bin:/bin"}, {"tools": tools}, "mine", mine / "hosts",
                         mine / "workdir", mine, None, lines.append,
                         identity=security.identity(pod, container, SHELL, POD), hidden=runtime.Hidden(root, (mine,)))
    assert proc.wait(60) == 0, lines
    proc.reader.join(5)
    assert (tools / "ran").read_text() == "true 1000\n"  # the container's own program, as its user; no helper


@needs_tools
@pytest.mark.skipif(not shutil.which("cc"), reason="needs a C compiler to build the preloaded library")
def test_ld_preload_in_the_pods_env_reaches_only_its_program_as_its_user(cluster):
    import subprocess

    root, mine, _ = cluster
    lib = root.parent / "lib"
    lib.mkdir(mode=0o777)
    lib.chmod(0o777)
    (lib / "who.c").write_text(
        "#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void who(void) {\n"
        f'  FILE *f = fopen("{lib}/loaded", "a"); if (f) {{ fprintf(f, "%d\\n", (int)getuid()); fclose(f); }}\n}}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib / "who.so"), str(lib / "who.c")], check=True)
    pod = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}
    container = {"name": "sh", "command": ["/bin/true"], "securityContext": {"capabilities": {"drop": ["ALL"]}}}
    lines: list[str] = []
    proc = runtime.start(SHELL, container, {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(lib / "who.so")}, {}, "mine",
                         mine / "hosts", mine / "workdir", mine, None, lines.append,
                         identity=security.identity(pod, container, SHELL, POD), hidden=runtime.Hidden(root, (mine,)))
    assert proc.wait(60) == 0, lines
    proc.reader.join(5)
    assert (lib / "loaded").read_text() == "1000\n"  # loaded once: by the container's program, as its user
