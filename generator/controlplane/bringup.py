"""The local cluster's bring-up as named steps, each a small function of the supervisor that owns
the cluster (its folder, its state, the children it starts). Each step declares the steps it comes
after and the processes it starts (as kwok's components declare their links): the start order is
derived from those by a topological sort, and the supervisor stops the processes in its reverse.
The supervisor writes each step's name to its log and to the state as it starts it, and on a
failure stops what the earlier steps started. What each component runs is components.py's, built
from one ControlPlane configuration chosen in the certificates step."""
from __future__ import annotations

import heapq
import ssl
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from generator.container import ports
from generator.controlplane import admin, components, firewall, network, pki, processes, storage
from generator.controlplane.realnode import node_name
from generator.controlplane.releases import base, kueue, operator, trainer

if TYPE_CHECKING:
    from generator.controlplane.supervisor import Supervisor


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Supervisor], None]
    # The steps that finish before this one wherever both run (one left out of a bring-up orders nothing).
    after: tuple[str, ...] = ()
    # The processes it starts, in the order it starts them: they are stopped in the reverse.
    starts: tuple[str, ...] = ()


class OrderError(ValueError):
    """The steps' declarations name an unknown step or go round in a circle: a bug, told by name."""


def image_registry(sup: Supervisor) -> None:
    """The machine's registry, which every cluster here shares and `cluster down` leaves running,
    started unless it runs (`cluster up` gave it its images before the bring-up)."""
    from generator.controlplane import registry

    registry.start(say=print)


def pod_network(sup: Supervisor) -> None:
    with network.choosing():
        sup.network = network.PodNetwork.for_cluster(sup.layout.root)
        sup.save(pod_network=sup.network)
        sup.network.create()
    # Before any pod or CoreDNS answers: only root reaches them (firewall.py). iptables is there: the
    # node needs it (cluster up installed it).
    firewall.close(sup.network.bridge, sup.network.cidr)


def certificates(sup: Supervisor) -> None:
    free = ports.free_port
    sup.config = components.ControlPlane(
        sup.layout, sup.network.gateway, sup.network.bridge, sup.network.cidr,
        components.Ports(etcd=free(), etcd_peer=free(), apiserver=free(), controller_manager=free(), scheduler=free()),
        node_name(), sup.node)
    ca = pki.Authority(sup.layout.pki)
    for cert in components.certificates(sup.config):
        ca.issue(cert.stem, cert.cn, org=cert.org, server=cert.server, ips=list(cert.ips), also_client=cert.also_client)
    pki.Authority(sup.config.front_proxy, components.FRONT_PROXY_CA).issue(components.FRONT_PROXY_CLIENT,
                                                                           components.FRONT_PROXY_CLIENT)
    pki.service_account_key(sup.layout.pki)


def etcd(sup: Supervisor) -> None:
    cfg = sup.config
    child = sup.start(components.etcd(cfg))
    context = _client_context(cfg, components.ETCD_CLIENT)
    processes.wait_until(lambda: urllib.request.urlopen(f"{cfg.etcd_url}/health", context=context, timeout=2).status == 200,
                         sup.left(), "etcd to be healthy", child)


def _client_context(cfg: components.ControlPlane, stem: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cfg.ca))
    context.load_cert_chain(*(str(p) for p in cfg.cert(stem)))
    return context


def kube_apiserver(sup: Supervisor) -> None:
    cfg = sup.config
    child = sup.start(components.kube_apiserver(cfg))
    sup.save(server=cfg.server, kubeconfig=str(cfg.layout.kubeconfig))
    components.write_files(components.Component("admin", [], files=components.admin_kubeconfig(cfg)))
    context = _client_context(cfg, "admin")
    processes.wait_until(lambda: urllib.request.urlopen(f"{cfg.server}/readyz", context=context, timeout=5).status == 200,
                         sup.left(), "kube-apiserver to be ready", child)


def kube_controller_manager(sup: Supervisor) -> None:
    sup.start(components.kube_controller_manager(sup.config))


def kube_scheduler(sup: Supervisor) -> None:
    sup.start(components.kube_scheduler(sup.config))


def node(sup: Supervisor) -> None:
    # What the nodes are started with, kept for `cluster up` on a running cluster.
    sup.save(node_options=sup.config.node)
    from generator.controlplane.realnode import node as real_node

    real_node.start(sup)


def more_nodes(sup: Supervisor) -> None:
    from generator.controlplane.realnode import node as real_node

    real_node.more_nodes(sup)


def default_storage(sup: Supervisor) -> None:
    api = admin.admin_client(sup.layout)
    admin.apply(api, [storage.storage_class()], "default", sup.end)
    storage.Provisioner(api, sup.layout.volumes, sup.stopping).start()


def default_service_account(sup: Supervisor) -> None:
    """The controller-manager makes each namespace's `default` ServiceAccount a moment after it
    starts; until then the API server refuses every pod there ("serviceaccount \"default\" not
    found"), so a pod created right after `cluster up` would be refused."""
    from kubernetes import client

    core = client.CoreV1Api(admin.admin_client(sup.layout))

    def made() -> bool:
        try:
            return bool(core.read_namespaced_service_account("default", "default"))
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise

    processes.wait_until(made, sup.left(), "the controller-manager to make the ServiceAccount default in namespace default",
                         sup.children["kube-controller-manager"])


def operator_release(sup: Supervisor) -> None:
    release, create_namespace = operator.release(sup.operator_values)
    sup.save(operator=base.install(sup.layout, release, operator.chart(), sup.operator_values, sup.end,
                                   create_namespace))


def trainer_release(sup: Supervisor) -> None:
    # Installed while the operator's pod starts: the releases become ready side by side.
    sup.save(trainer=base.install(sup.layout, trainer.RELEASE, trainer.chart(sup.layout), trainer.VALUES, sup.end))


def kueue_release(sup: Supervisor) -> None:
    # After Trainer's: Kueue's webhooks refuse PyTorchJobs and TrainJobs until its pod answers,
    # so nothing that creates them may run before it is ready.
    chart = kueue.checked_chart()
    sup.save(kueue=base.install(sup.layout, kueue.RELEASE, base.Chart(str(chart)), kueue.values(chart), sup.end))


def releases_ready(sup: Supervisor) -> None:
    """Each installed release ready, one after the other, all within what `cluster up --timeout`
    leaves the bring-up (the supervisor's deadline, Supervisor.end)."""
    kubelet = sup.first_kubelet()
    installed = sup.state.operator
    if installed:
        base.wait_ready(sup.layout, operator.RELEASE.with_deployment(installed.namespace, installed.deployment),
                        kubelet, sup.end)
    for installed, release in ((sup.state.trainer, trainer.RELEASE), (sup.state.kueue, kueue.RELEASE)):
        if installed:
            base.wait_ready(sup.layout, release, kubelet, sup.end)


def kueue_queues(sup: Supervisor) -> None:
    """The ResourceFlavor, ClusterQueue and LocalQueue a job's `kueue.queueName` names, once Kueue's
    webhooks (which judge them) answer."""
    if sup.kueue_quota is not None:
        kueue.create_queues(sup.layout, sup.config.node_names, sup.kueue_quota, sup.end)


# What a node runs (each node its own, known as PROGRAM@NODE), in the order a node starts them.
NODE_PROCESSES = ("containerd", "kubelet", "kube-proxy")

# Written in no particular order: the order is derived from `after` alone (steps ready together go
# by name), so where a step is written here never changes when it runs.
STEPS = (
    Step("image registry", image_registry),
    Step("pod network", pod_network),
    Step("certificates", certificates, after=("pod network",)),  # the API server's address is the bridge's
    Step("etcd", etcd, after=("certificates",), starts=("etcd",)),
    Step("kube-apiserver", kube_apiserver, after=("etcd",), starts=("kube-apiserver",)),
    Step("kube-controller-manager", kube_controller_manager, after=("kube-apiserver",),
         starts=("kube-controller-manager",)),
    Step("kube-scheduler", kube_scheduler, after=("kube-apiserver",), starts=("kube-scheduler",)),
    # The real node pulls its pods' images from the machine's registry.
    Step("node", node, after=("image registry", "kube-apiserver"), starts=("coredns", *NODE_PROCESSES)),
    # The other nodes (`cluster up --nodes`) once the releases run on the first: the cluster's controllers
    # stay there, and a rehearsed loss of another node takes only jobs' pods with it.
    Step("more nodes", more_nodes, after=("node", "releases ready"), starts=NODE_PROCESSES),
    # Its volumes are the node's folders, bound by the controller-manager's PV controller.
    Step("default storage", default_storage, after=("kube-controller-manager", "node")),
    Step("default service account", default_service_account, after=("kube-controller-manager", "node")),
    # A release's pods need the scheduler, the controllers and the node.
    Step("operator release", operator_release, after=("kube-controller-manager", "kube-scheduler", "node")),
    Step("trainer release", trainer_release, after=("kube-controller-manager", "kube-scheduler", "node")),
    # Kueue's integrations watch the PyTorchJob and TrainJob kinds, whose CRDs those releases install.
    Step("kueue release", kueue_release, after=("kube-controller-manager", "kube-scheduler", "node",
                                                "operator release", "trainer release")),
    Step("releases ready", releases_ready, after=("node", "operator release", "trainer release", "kueue release")),
    Step("kueue queues", kueue_queues, after=("releases ready", "more nodes")),  # Kueue's webhooks judge them
)


def ordered(chosen: Iterable[Step], declared: Iterable[Step] = STEPS) -> list[Step]:
    """`chosen` (some of `declared`) in an order where each step comes after those it names; of the
    steps ready together, the first by name. A name that no declared step has, or two steps have,
    or a circle, is an OrderError naming it."""
    declared, chosen = list(declared), list(chosen)
    names = {s.name for s in declared}
    twice = sorted({s.name for s in declared if [d.name for d in declared].count(s.name) > 1})
    if twice:
        raise OrderError(f"more than one bring-up step is called {', '.join(map(repr, twice))}; name each once")
    for step in declared:
        unknown = [n for n in step.after if n not in names]
        if unknown:
            raise OrderError(f"bring-up step {step.name!r} comes after {', '.join(map(repr, unknown))}, which no step "
                             f"is called; the steps are {', '.join(sorted(names))}")
    _check_acyclic(declared)
    here = {s.name: s for s in chosen}
    stray = sorted(set(here) - names)
    if stray:
        raise OrderError(f"bring-up steps {', '.join(map(repr, stray))} are not among the declared ones")
    waits = {s.name: {n for n in s.after if n in here} for s in chosen}
    ready = [n for n, w in waits.items() if not w]
    heapq.heapify(ready)
    order = []
    while ready:
        name = heapq.heappop(ready)
        order.append(here[name])
        for other, w in waits.items():
            if name in w:
                w.discard(name)
                if not w:
                    heapq.heappush(ready, other)
    return order


def _check_acyclic(declared: list[Step]) -> None:
    """A circle among the declarations, found by a depth-first walk and told as its path."""
    after = {s.name: s.after for s in declared}
    done: set[str] = set()

    def walk(name: str, path: list[str]) -> None:
        if name in path:
            circle = path[path.index(name):] + [name]
            raise OrderError(f"bring-up steps wait for each other in a circle: {' after '.join(map(repr, circle))}; "
                             "drop one of those `after` names")
        if name in done:
            return
        for first in after[name]:
            walk(first, [*path, name])
        done.add(name)

    for step in declared:
        walk(step.name, [])


def stop_order(declared: Iterable[Step] = STEPS) -> list[str]:
    """The processes the steps start, last started first: each stops before what it depends on."""
    names = [name for step in reversed(ordered(declared, declared)) for name in reversed(step.starts)]
    return list(dict.fromkeys(names))


def steps(with_operator: bool, with_trainer: bool = False, with_kueue: bool = False, nodes: int = 1) -> list[Step]:
    """`cluster up --no-operator` leaves out the operator's release (the user installs it with
    helm), and only `--trainer` installs Kubeflow Trainer's, only `--kueue` Kueue's."""
    left_out = set() if with_operator else {operator_release}
    if not with_trainer:
        left_out.add(trainer_release)
    if not with_kueue:
        left_out |= {kueue_release, kueue_queues}
    if not (with_operator or with_trainer or with_kueue):
        left_out.add(releases_ready)
    if nodes < 2:
        left_out.add(more_nodes)
    return ordered(s for s in STEPS if s.run not in left_out)
