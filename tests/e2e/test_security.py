"""The local cluster against the other users of its machine, and its node's securityContext:
every listening socket of the control plane asks for credentials; a process running as uid 65534
reads none of the cluster's keys, tokens, kubeconfigs or etcd data and gets from the API server,
etcd and the kubelet no more than anonymous users get; the operator's pod runs as the chart says;
runAsNonRoot with a root user is refused; a container cannot read another pod's token."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.e2e.test_kubelet import events, log_of
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
NOBODY = 65534


def control_plane_pids(cluster) -> dict[str, int]:
    state = json.loads((cluster.dir / "state.json").read_text())
    return {"supervisor": state["pid"], **{name: p["pid"] for name, p in state["processes"].items()}}


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def listeners(pid: int) -> tuple[list[tuple[str, int]], list[str]]:
    """(address, port) of each TCP socket `pid` listens on, and the names of its listening unix
    sockets (an abstract one starts with @), read from /proc as `ss -lx` and `ss -lt` read them."""
    inodes = _socket_inodes(pid)
    tcp = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address)
            if width == 8:
                host = ".".join(str(b) for b in raw[::-1])
            else:
                host = "::" if raw == bytes(16) else "ipv6"
            tcp.append((host, int(port, 16)))
    unix = []
    for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes and int(fields[3], 16) & 0x10000:  # __SO_ACCEPTCON
            unix.append(fields[7])
    return tcp, unix


def as_nobody(cluster, script: str, *args: str) -> dict:
    """`script` run by uid 65534 with no groups (another user of this machine); its JSON answer."""
    proc = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                           sys.executable, "-c", textwrap.dedent(script), *args],
                          capture_output=True, text=True, timeout=120, cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


PROBE = """
import json, socket, ssl, sys, urllib.request, urllib.error

def answer(url):
    context = ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return type(e).__name__

def unix(path):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(("\\0" + path[1:]) if path.startswith("@") else path)
        return "connected"
    except OSError as e:
        return type(e).__name__

out = {}
for target in json.loads(sys.argv[1]):
    kind, where = target
    if kind == "unix":
        out[where] = unix(where)
    else:
        out[where] = {f"{s}://{p}": answer(f"{s}://{where}{p}") for s in ("http", "https")
                      for p in ("/", "/metrics", "/configz", "/api/v1/secrets", "/v3/kv/range", "/containerLogs/a/b/c")}
print(json.dumps(out))
"""


def test_every_listening_socket_of_the_control_plane_asks_for_credentials(cluster):
    targets = []
    for pid in control_plane_pids(cluster).values():
        tcp, unix = listeners(pid)
        host_of = {"0.0.0.0": "127.0.0.1", "::": "127.0.0.1"}
        targets += [("tcp", f"{host_of.get(h, h)}:{port}") for h, port in tcp]
        targets += [("unix", path) for path in unix]
    assert len([t for t in targets if t[0] == "tcp"]) >= 5, targets  # etcd, API server, controller-manager, scheduler, kubelet
    answers = as_nobody(cluster, PROBE, json.dumps(targets))
    for where, got in answers.items():
        if isinstance(got, str):  # a unix socket: no one else may connect
            assert got in ("PermissionError", "FileNotFoundError"), f"{where}: {got}"
            continue
        # Anything but a 2xx: refused at the TLS handshake, 401 or 403.
        opened = {path: code for path, code in got.items() if isinstance(code, int) and 200 <= code < 300}
        assert not opened, f"{where} answers another user without credentials: {opened}"


def test_another_user_reads_none_of_the_clusters_keys_tokens_kubeconfigs_or_data(cluster):
    root = cluster.dir
    assert root.stat().st_mode & 0o777 == 0o700
    secrets = [p for p in root.rglob("*") if p.is_file() and (
        p.suffix == ".key" or p.name in ("token", "tls.key", "kubeconfig", "ca.crt") or "etcd" in p.parts
        or p.parent.name == "kubeconfigs")]
    assert any(p.name == "token" for p in secrets) and any(p.suffix == ".key" for p in secrets)
    read = """
    import json, sys
    out = {}
    for path in sys.argv[1:]:
        try:
            open(path, "rb").read(1)
            out[path] = "read"
        except OSError as e:
            out[path] = type(e).__name__
    print(json.dumps(out))
    """
    got = as_nobody(cluster, read, str(root), *map(str, secrets))
    assert {path: why for path, why in got.items() if why != "PermissionError"} == {}


def test_another_user_gets_nothing_from_etcd_the_api_server_or_the_kubelet(cluster):
    state = json.loads((cluster.dir / "state.json").read_text())
    pids = control_plane_pids(cluster)
    etcd_port = min(port for _, port in listeners(pids["etcd"])[0])
    node = cluster.core().list_node().items[0]
    kubelet = f"{node.status.addresses[0].address}:{node.status.daemon_endpoints.kubelet_endpoint.port}"
    probe = """
    import json, ssl, sys, urllib.request, urllib.error
    out = {}
    for url in sys.argv[1:]:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=b'{"key": "Lw==", "range_end": "MA=="}')
                                        if "/v3/" in url else url, timeout=5,
                                        context=ssl._create_unverified_context()) as r:
                out[url] = r.status
        except urllib.error.HTTPError as e:
            out[url] = e.code
        except Exception as e:
            out[url] = type(e).__name__
    print(json.dumps(out))
    """
    server = state["server"]
    got = as_nobody(cluster, probe, f"https://127.0.0.1:{etcd_port}/v3/kv/range",
                    f"http://127.0.0.1:{etcd_port}/v3/kv/range", f"{server}/api/v1/secrets", f"{server}/version",
                    f"https://{kubelet}/containerLogs/kubeflow/x/y")
    assert got[f"{server}/api/v1/secrets"] == got[f"{server}/version"] == 401  # anonymous requests are off
    for url in (f"https://127.0.0.1:{etcd_port}/v3/kv/range", f"http://127.0.0.1:{etcd_port}/v3/kv/range",
                f"https://{kubelet}/containerLogs/kubeflow/x/y"):
        assert not isinstance(got[url], int), f"{url} answered {got[url]}"  # refused before any HTTP


def _status(pid: int) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)


def test_the_operators_pod_runs_as_its_chart_says(cluster):
    state = json.loads((cluster.dir / "state.json").read_text())["operator"]
    (pod,) = cluster.core().list_namespaced_pod(state["namespace"],
                                                label_selector="app.kubernetes.io/component=controller").items
    pid = int(pod.status.container_statuses[0].container_id.split("://")[1])
    status = _status(pid)
    assert status["Uid"].split()[0] == status["Gid"].split()[0] == "65532"
    assert status["CapEff"].strip() == status["CapBnd"].strip() == "0000000000000000"
    assert status["NoNewPrivs"].strip() == "1"
    assert any("pytorchjob-kit-" in line for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
    assert pod.status.container_statuses[0].ready


def _pod(name: str, command: str, security: dict | None = None, pod_security: dict | None = None) -> dict:
    container = {"name": "main", "image": "busybox", "command": ["sh", "-c", command]}
    if security:
        container["securityContext"] = security
    spec = {"restartPolicy": "Never", "containers": [container], "terminationGracePeriodSeconds": 1}
    if pod_security:
        spec["securityContext"] = pod_security
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def delete(core, name: str) -> None:
    from kubernetes.client import ApiException

    try:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _phase(cluster, name: str) -> str:
    return cluster.core().read_namespaced_pod(name, "default").status.phase


def test_run_as_non_root_with_a_root_user_is_refused_as_on_a_cluster(cluster):
    core = cluster.core()
    core.create_namespaced_pod("default", _pod("sec-root", "true", pod_security={"runAsNonRoot": True, "runAsUser": 0}))
    try:
        def waiting():
            statuses = core.read_namespaced_pod("sec-root", "default").status.container_statuses or []
            return statuses and statuses[0].state.waiting and statuses[0].state.waiting.reason
        wait_for(lambda: waiting() == "CreateContainerConfigError", 60, "CreateContainerConfigError")
        messages = [e.message for e in events(cluster, "sec-root")]
        assert any("container's runAsUser breaks non-root policy" in m for m in messages), messages
    finally:
        delete(core, "sec-root")


def test_a_container_reads_its_own_token_but_not_another_pods(cluster):
    core = cluster.core()
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    core.create_namespaced_pod("default", _pod("sec-a", "sleep 300"))
    try:
        wait_for(lambda: _phase(cluster, "sec-a") == "Running", 60, "sec-a to run")
        uid = core.read_namespaced_pod("sec-a", "default").metadata.uid
        other = cluster.dir / "kubelet" / "pods" / f"default_sec-a_{uid}"
        theirs = next(other.glob("volumes/kube-api-access-*/token"))
        core.create_namespaced_pod("default", _pod(
            "sec-b", f"test -s {token} && echo own-token-read; cat {theirs} >/dev/null 2>&1 && echo other-read || "
                     "echo other-hidden; id -u",
            security={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            pod_security={"runAsUser": 1000, "runAsNonRoot": True}))
        wait_for(lambda: _phase(cluster, "sec-b") in ("Succeeded", "Failed"), 60, "sec-b to finish")
        time.sleep(0.5)
        assert log_of(cluster, "sec-b").split() == ["own-token-read", "other-hidden", "1000"]
    finally:
        for name in ("sec-a", "sec-b"):
            delete(core, name)


def test_an_exec_probe_runs_as_the_containers_user(cluster):
    core = cluster.core()
    pod = _pod("sec-probe", "sleep 300", pod_security={"runAsUser": 1000, "runAsGroup": 1000})
    pod["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["sh", "-c", 'test "$(id -u)" = 1000']},
                                                      "periodSeconds": 1}
    core.create_namespaced_pod("default", pod)
    try:
        wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in
                             core.read_namespaced_pod("sec-probe", "default").status.conditions or []), 60,
                 "the probe, run as uid 1000, to pass")
    finally:
        delete(core, "sec-probe")


HELPERS = ("nsenter", "unshare", "sh", "mount", "mkdir", "touch", "setpriv", "env", "printf", "python3", "id", "true")


def test_a_restricted_pod_gets_no_program_on_its_path_run_as_root(cluster):
    """A pod PodSecurity `restricted` admits, whose PATH starts with a folder it could write (here
    one of this machine's, made for the test): every program the node might look up there is a fake
    that writes who ran it. Only the container's own program may run, as its user."""
    import shutil
    import tempfile

    from kubernetes import client

    core = cluster.core()
    fakes = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="pjk-fakes-"))
    namespace = "sec-restricted"
    try:
        fakes.chmod(0o777)
        for name in HELPERS:
            (fakes / name).write_text(f"#!/bin/sh\necho \"{name} $(/usr/bin/id -u)\" >> {fakes}/ran\n")
            (fakes / name).chmod(0o755)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
            name=namespace, labels={"pod-security.kubernetes.io/enforce": "restricted"})))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fakes", "namespace": namespace},
               "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "volumes": [{"name": "scratch", "emptyDir": {}}],
                        "containers": [{"name": "main", "image": "busybox", "command": ["true"],
                                        "env": [{"name": "PATH", "value": f"{fakes}:/usr/bin:/bin"}],
                                        "volumeMounts": [{"name": "scratch", "mountPath": "/var/run/scratch"}],
                                        "securityContext": {"allowPrivilegeEscalation": False,
                                                            "capabilities": {"drop": ["ALL"]}}}]}}
        core.create_namespaced_pod(namespace, pod)  # admitted: it meets `restricted`

        def phase() -> str:
            return core.read_namespaced_pod("fakes", namespace).status.phase

        wait_for(lambda: phase() in ("Succeeded", "Failed"), 60, "the pod to finish")
        assert phase() == "Succeeded"
        assert (fakes / "ran").read_text() == "true 1000\n"  # its own program, as its user; no helper of the node's
    finally:
        core.delete_namespace(namespace, grace_period_seconds=0)
        shutil.rmtree(fakes)
