"""The node's bring-up step: the node's network namespace,
containerd with the node's configuration (pulling from the machine's registry), the pause image
imported into it, CoreDNS, the cluster's cgroup made in every hierarchy, the kernel settings
recorded, the kubelet until the Node is Ready, then kube-proxy until the `kubernetes` Service
answers. The supervisor stops them as it stops every child; `teardown` undoes what they leave on
the machine."""
from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from generator.container import ports
from generator.controlplane import admin, build, pins, pki, processes
from generator.controlplane.realnode import config, containerd, dns, gpus, host, kernel, packaged, proxy, support
from generator.errors import UserError
from generator.images import registry
from generator.images.registry import Registry

if TYPE_CHECKING:
    from generator.controlplane.supervisor import Supervisor


def describe(sup: Supervisor) -> list[config.RealNode]:
    """Every node of the cluster: the machine's packages, the registry's names and the kubelet's
    reservation read once, each node its own ports."""
    runc, cni = packaged.install(say=lambda line: print(line, flush=True))
    free = ports.free_port
    reserved = tuple(sorted(support.system_reserved(sup.node, support.Capacity.read()).items()))
    pulls = mirror()
    return [config.RealNode(sup.config, config.NodePorts(kubelet=free(), healthz=free(), dns_ready=free()), runc, cni,
                            pulls, reserved, index) for index in range(sup.node.count)]


def mirror(reg: Registry | None = None) -> config.Mirror:
    """The machine's read-only registry, which the node pulls from (the bring-up's first step
    started it with the writable one), and the registry names it holds images under now."""
    reg = reg or registry.default()
    if not reg.readonly.address:
        raise UserError(f"the registry in {reg.root} is not running, and the real node pulls every image from it: "
                        "run `python -m generator image registry up`, then `cluster up` again")
    return config.Mirror(reg.readonly.address, registry_names(reg.catalog()))


def registry_names(held: list[str]) -> tuple[str, ...]:
    """The registries of the images a registry holds (every name written out, as `docker.io/library/alpine:3.10`);
    the charts it holds (`charts/pytorch-operator:0.1.0`, whose first part names no registry) are no image's."""
    firsts = {name.split("/", 1)[0] for name in held if "/" in name}
    return tuple(sorted(f for f in firsts if "." in f or ":" in f or f == "localhost"))


def copy_registry_client(reg: Registry, folders: config.Folders) -> None:
    """The read-only registry's CA and client pair into the node's folder (0700), each 0600, for
    containerd's hosts files: a key that pulls, and that the writable registry refuses."""
    folders.registry_client.mkdir(mode=0o700, parents=True, exist_ok=True)
    folders.registry_client.chmod(0o700)
    for name in containerd.REGISTRY_CLIENT_FILES:
        fd = os.open(folders.registry_client / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(fd, 0o600)
            out.write((reg.readonly.certs / name).read_bytes())


def start(sup: Supervisor) -> None:
    """The first node, with what every node shares: the cluster's DNS and the kernel settings'
    record (the other nodes join after the releases: `more_nodes`)."""
    nodes = describe(sup)
    for node in nodes:
        config.check_sockets(node.folders)
    done, _ = host.teardown(sup.layout.root)  # what a killed earlier run of this cluster left
    if done:
        print(f"removed what an earlier run left: {'; '.join(done)}", flush=True)
    sup.real_nodes = {node.name: node for node in nodes}
    first = nodes[0]
    _folder(first)
    cluster_dns(sup, first)
    values = kernel.hold_kernel_settings(sup.layout.root)
    print("kernel settings before the kubelet (put back at cluster down): "
          + ", ".join(f"{k}={v}" for k, v in values.items()), flush=True)
    boot(sup, first, sup.end)
    sup.save(node=first.name, operator=None)


def more_nodes(sup: Supervisor) -> None:
    """The other nodes, side by side, once the releases are ready: the cluster's controllers run on
    the first node, so a rehearsed loss of another one takes only the jobs' pods with it."""
    import concurrent.futures

    others = list(sup.real_nodes.values())[1:]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(len(others), 1)) as pool:
        for started in [pool.submit(boot, sup, node, sup.end) for node in others]:
            started.result()


def _folder(node: config.RealNode) -> None:
    node.folders.root.mkdir(mode=0o700, exist_ok=True)
    node.folders.root.chmod(0o700)


def boot(sup: Supervisor, node: config.RealNode, end: float) -> None:
    """One node from its folder, as a machine boots: its network, containerd, the kubelet until the
    Node is Ready, kube-proxy; all within the monotonic deadline `end`."""
    from kubernetes import client

    left = lambda: processes.left(end)  # noqa: E731
    sup.save_node(node.name, "starting")
    folders = node.folders
    _folder(node)
    copy_registry_client(registry.default(), folders)
    node.network.create()
    write_cni_launchers(node)
    cert = config.serving_certificate(node)
    pki.Authority(sup.layout.pki).issue(cert.stem, cert.cn, org=cert.org, server=True, names=[node.name],
                                        ips=list(cert.ips))
    containerd_proc = sup.start(config.containerd(node), node.name)
    processes.wait_until(lambda: _ctr(folders, "version").returncode == 0, left(), "containerd to answer on its socket",
                         containerd_proc)
    import_image(folders, build.binary(pins.PAUSE_ARCHIVE))
    host.make_cgroup_root(sup.layout.root, node.index)
    kubelet = sup.start(config.kubelet(node), node.name)
    core = client.CoreV1Api(admin.admin_client(sup.layout))
    processes.wait_until(lambda: ready(core, node.name), left(), f"node {node.name} to be Ready", kubelet)
    if sup.node.gpus:
        gpus.advertise(core, node.name, sup.node.gpus)
        if node.name not in sup.gpu_keepers:
            sup.gpu_keepers.add(node.name)
            gpus.Keeper(core, node.name, sup.node.gpus, sup.stopping).start()
    services(sup, node, left())
    sup.save_node(node.name, "ready")


def write_cni_launchers(node: config.RealNode) -> None:
    folder = node.folders.cni_bin
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path, text in config.cni_launchers(node).items():
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
        with os.fdopen(fd, "w") as out:
            out.write(text)


def services(sup: Supervisor, node: config.RealNode, within: float) -> None:
    """kube-proxy with its own certificate (its rights are the API server's own binding), until the
    `kubernetes` Service's rule is written: the controllers the charts install dial it first."""
    cert = proxy.certificate()
    pki.Authority(sup.layout.pki).issue(cert.stem, cert.cn)
    child = sup.start(proxy.component(node, build.binary(pins.KUBE_PROXY)), node.name)
    processes.wait_until(lambda: proxy.synced(node), within, "kube-proxy to write the `kubernetes` Service's rule", child)


def cluster_dns(sup: Supervisor, node: config.RealNode) -> None:
    """CoreDNS with its own certificate and read-only rights, answering before any pod asks."""
    cert = dns.certificate()
    pki.Authority(sup.layout.pki).issue(cert.stem, cert.cn)
    admin.apply(admin.admin_client(sup.layout), dns.rbac(), "default", sup.end)
    child = sup.start(dns.component(node, build.binary(pins.COREDNS)))
    url = dns.ready_url(node)
    processes.wait_until(lambda: urllib.request.urlopen(url, timeout=2).status == 200, sup.left(),
                         f"CoreDNS to answer on {node.address}:{dns.PORT}", child)


def import_image(folders: config.Folders, archive: Path) -> None:
    """Put an OCI image archive into a node's containerd, where its pods find the image by its name
    (with imagePullPolicy Never or IfNotPresent)."""
    done = _ctr(folders, "images", "import", str(archive))
    if done.returncode != 0:
        raise UserError(f"ctr images import {archive} failed: {done.stderr.strip()}; is the node in {folders.root} up?")


def kill(sup: Supervisor, name: str) -> list[int]:
    """`cluster node kill`: the node's power pulled (host.power_cut) and its cable with it; the
    pids killed."""
    node = sup.real_nodes[name]
    sup.save_node(name, "killed")
    # The cable first: the kernel resets a killed process's connections, which a machine that lost
    # its power never does; its peers must find out the way they would, by their timeouts.
    node.network.cut()
    killed = host.power_cut(sup.layout.root, node.index)
    for child in sup.node_children(name).values():
        child.proc.wait()
    sup.save()
    return killed


def restart(sup: Supervisor, name: str, within: float) -> None:
    """`cluster node start`: a killed node booted again from its folder, after what its processes
    left on the machine is cleaned as a reboot would (its mounts, its sandboxes' network state)."""
    node = sup.real_nodes[name]
    done, problems = host.clean_node(node.folders)
    for line in [*done, *(f"warning: {p}" for p in problems)]:
        print(f"node {name}: {line}", flush=True)
    boot(sup, node, time.monotonic() + within)


def stop_containers(nodes: list[config.Folders], grace: float = 30) -> int:
    """SIGTERM to every running container of the nodes once their kubelets have stopped (a kubelet
    stops none itself, and would restart them), then up to `grace` seconds, for all of them at once,
    to end, as a pod's deletion gives them; what is left, `host.teardown` kills. How many were running."""

    def running(folders: config.Folders) -> list[str]:
        listed = _ctr(folders, "tasks", "ls")
        rows = [line.split() for line in listed.stdout.splitlines()[1:]] if listed.returncode == 0 else []
        return [row[0] for row in rows if len(row) >= 3 and row[2] == "RUNNING"]

    count = 0
    for folders in nodes:
        tasks = running(folders)
        count += len(tasks)
        for task in tasks:
            _ctr(folders, "tasks", "kill", "--signal", "SIGTERM", task)
    end = time.monotonic() + grace
    while any(running(f) for f in nodes) and time.monotonic() < end:
        time.sleep(0.5)
    return count


def _ctr(folders: config.Folders, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(config.ctr(folders, *args), capture_output=True, text=True, timeout=120)


def ready(core, name: str) -> bool:
    """Whether the Node's Ready condition is True."""
    return admin.holds(core.read_node_status(name), "Ready")
