"""The local cluster against the other users of its machine:
every listening socket of the control plane and the node asks for credentials; a process running
as uid 65534 reads none of the cluster's keys, tokens, kubeconfigs or etcd data and gets from the
API server, etcd and the kubelet no more than anonymous users get; the operator's pod runs as the
chart says. The node's own securityContext checks are in test_real_node."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import container_pid
from tests.support.reach import NOBODY, reach

pytestmark = pytest.mark.e2e


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
    targets, in_node_namespace = [], {}
    ours = os.readlink("/proc/self/ns/net")
    for name, pid in control_plane_pids(cluster).items():
        tcp, unix = listeners(pid)
        targets += [("unix", path) for path in unix]
        if os.readlink(f"/proc/{pid}/ns/net") != ours:
            in_node_namespace[name] = tcp  # the real node's kube-proxy, in the node's network namespace
            continue
        host_of = {"0.0.0.0": "127.0.0.1", "::": "127.0.0.1"}
        targets += [("tcp", f"{host_of.get(h, h)}:{port}") for h, port in tcp]
    # There, loopback alone (its metrics and health ports): no one outside that namespace reaches it,
    # and only root enters it.
    assert all(host == "127.0.0.1" for tcp in in_node_namespace.values() for host, _ in tcp), in_node_namespace
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
    files = []
    for folder, subfolders, names in os.walk(root):  # os.walk passes over folders that go while it walks
        if Path(folder).name == "containerd":
            subfolders[:] = [f for f in subfolders if f != "root"]  # a real node's images, not the cluster's secrets
        files += [Path(folder, name) for name in names]
    secrets = [p for p in files if p.is_file() and (
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
    for url in (f"https://127.0.0.1:{etcd_port}/v3/kv/range", f"http://127.0.0.1:{etcd_port}/v3/kv/range"):
        assert not isinstance(got[url], int), f"{url} answered {got[url]}"  # refused before any HTTP
    # The kubelet authenticates through the API server, which knows no anonymous user.
    logs = got[f"https://{kubelet}/containerLogs/kubeflow/x/y"]
    assert logs == 401, f"the kubelet answered {logs}"


def _status(pid: int) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)


def test_the_operators_pod_runs_as_its_chart_says(cluster):
    state = json.loads((cluster.dir / "state.json").read_text())["operator"]
    (pod,) = cluster.core().list_namespaced_pod(state["namespace"],
                                                label_selector="app.kubernetes.io/component=controller").items
    pid = container_pid(pod.status.container_statuses[0].container_id)
    status = _status(pid)
    assert status["Uid"].split()[0] == status["Gid"].split()[0] == "65532"
    assert status["CapEff"].strip() == status["CapBnd"].strip() == "0000000000000000"
    assert status["NoNewPrivs"].strip() == "1"
    assert any("pytorchjob-kit-" in line for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
    assert pod.status.container_statuses[0].ready


def test_another_user_is_refused_by_the_pods_and_coredns_and_root_is_not(cluster):
    """The machine routes the pods' addresses, and CoreDNS listens on the bridge's: without the
    cluster's firewall chain, uid 65534 resolved Services and read the operator's metrics."""
    import ipaddress

    cidr = json.loads((cluster.dir / "state.json").read_text())["pod_network"]["cidr"]
    dns = str(ipaddress.ip_network(cidr).network_address + 1)
    state = json.loads((cluster.dir / "state.json").read_text())["operator"]
    (pod,) = cluster.core().list_namespaced_pod(state["namespace"],
                                                label_selector="app.kubernetes.io/component=controller").items
    targets = [["tcp", pod.status.pod_ip, 8080], ["udp", dns, 53], ["tcp", dns, 53]]
    metrics, dns_udp, dns_tcp = (f"{k} {h}:{p}" for k, h, p in targets)
    got = reach(targets, NOBODY)
    assert got == {metrics: "ConnectionRefusedError", dns_udp: "PermissionError", dns_tcp: "ConnectionRefusedError"}
    assert set(reach(targets).values()) == {"answered"}  # the API server and the kubelet run as root


def test_the_nodes_registry_key_pulls_and_changes_nothing(cluster):
    """A cluster's folder holds the read-only registry's client: it pulls there; the read-only
    registry answers a push or a delete with 405, and the writable one, which pushes and deletes,
    refuses the key at the TLS handshake."""
    import ssl
    import urllib.error
    import urllib.request

    from generator.images.registry import MANIFEST_TYPES, default, split

    reg = default()
    client = cluster.dir / "node" / "registry-client"
    hosts = (cluster.dir / "node" / "certs.d" / "ghcr.io" / "hosts.toml").read_text()
    assert f"https://{reg.readonly.address}/v2/ghcr.io" in hosts and reg.address not in hosts

    def ask(address: str, path: str, method: str = "GET", ca: Path = client / "ca.crt") -> int:
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(client / "client.cert"), str(client / "client.key"))
        req = urllib.request.Request(f"https://{address}{path}", method=method, headers={"Accept": MANIFEST_TYPES},
                                     data=b"{}" if method in ("POST", "PUT") else None)
        try:
            with urllib.request.urlopen(req, context=context, timeout=10) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    repo, tag = split(next(n for n in reg.catalog() if n.startswith("ghcr.io/kubeflow/")))
    digest = reg.has(f"{repo}:{tag}")
    assert ask(reg.readonly.address, f"/v2/{repo}/manifests/{tag}") == 200
    writes = [("POST", f"/v2/{repo}/blobs/uploads/"), ("PUT", f"/v2/{repo}/manifests/{tag}"),
              ("DELETE", f"/v2/{repo}/manifests/{digest}")]
    assert {path: ask(reg.readonly.address, path, method) for method, path in writes} == {p: 405 for _, p in writes}
    for method, path in [("GET", f"/v2/{repo}/manifests/{tag}"), *writes]:
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            ask(reg.address, path, method, ca=reg.certs / "ca.crt")
    assert reg.has(f"{repo}:{tag}") == digest
