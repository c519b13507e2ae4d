"""What this machine's builds are made from, each fact once: our Go modules (in gomodules/, found
by generator/paths.py), whose go.mod files pin Kubernetes, etcd, JobSet, containerd and CoreDNS; the
releases `go install`ed at their own versions (training-operator, helm, Trainer, the registry,
Kueue); the binaries' names; the real node's sandbox image. controlplane/build.py turns them into
its table of build groups; charts and releases read their versions here."""
from __future__ import annotations

from pathlib import Path

from generator import paths

# The control plane's Kubernetes release and etcd (embed), kubectl of the same release for the user.
GO_MODULE = paths.go_module("go")
ETCD_MAIN = GO_MODULE / "cmd" / "etcd" / "main.go"
KUBE_COMMANDS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
OPERATOR_MODULE = "github.com/kubeflow/training-operator"
OPERATOR_VERSION = "v1.9.4"
OPERATOR_PACKAGE = f"{OPERATOR_MODULE}/cmd/training-operator.v1"
OPERATOR_BINARY = "training-operator.v1"
# Helm v4, the major our users install now and the engine the generator renders with (helm-python-sdk).
HELM_MODULE = "helm.sh/helm/v4"
HELM_VERSION = "v4.3.1"
HELM_PACKAGE = f"{HELM_MODULE}/cmd/helm"
HELM_BINARY = "helm"
# Kubeflow Trainer v2 and the JobSet controller its chart depends on (`cluster up --trainer`).
TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
TRAINER_VERSION = "v2.3.0"
TRAINER_PACKAGE = f"{TRAINER_MODULE}/cmd/trainer-controller-manager"
TRAINER_BINARY = "trainer-controller-manager"
# JobSet's version is the one jobset/go.mod requires; `go install` cannot build it (the proxy will not list it).
JOBSET_MODULE_DIR = paths.go_module("jobset")
JOBSET_MODULE = "sigs.k8s.io/jobset"
JOBSET_BINARY = "jobset"
# The OCI registry that holds this machine's images (controlplane/registry.py): distribution's, the
# registry most clusters' mirrors run.
REGISTRY_MODULE = "github.com/distribution/distribution/v3"
REGISTRY_VERSION = "v3.0.0"
REGISTRY_PACKAGE = f"{REGISTRY_MODULE}/cmd/registry"
REGISTRY_BINARY = "registry"
# Kueue (`cluster up --kueue`): the newest release the proxy serves; it admits both PyTorchJobs (an
# integration deprecated since v0.19, its removal planned for v0.20) and TrainJobs.
KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.19.2"
KUEUE_PACKAGE = f"{KUEUE_MODULE}/cmd/kueue"
KUEUE_BINARY = "kueue"

# The real node: the kubelet and kube-proxy of the control plane's release, containerd v2 with its
# runc shim and ctr, CoreDNS with the plugins its Corefile uses (gomodules/coredns/main.go).
KUBELET = "kubelet"
KUBE_PROXY = "kube-proxy"
CONTAINERD_MODULE_DIR = paths.go_module("containerd")
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_BINARIES = ["containerd", "containerd-shim-runc-v2", "ctr"]
# No cgo, so no btrfs, devmapper or zfs snapshotters: the node uses overlayfs.
CONTAINERD_TAGS = "no_btrfs no_devmapper no_zfs"
COREDNS_MODULE_DIR = paths.go_module("coredns")
COREDNS_MODULE = "github.com/coredns/coredns"
COREDNS = "coredns"
# The sandbox image: kubernetes' own pause program (build/pause of the k8s.io/kubernetes module),
# FROM scratch, run as 65535 as upstream's image is.
PAUSE_TAG = "3.10.2"
PAUSE_IMAGE = f"localhost/pytorchjob-kit/pause:{PAUSE_TAG}"
PAUSE_ARCHIVE = "pause.oci.tar"
PAUSE_USER = "65535:65535"


def required(go_mod: Path, module: str) -> str:
    """The version of `module` that the go.mod `go_mod` requires."""
    for line in go_mod.read_text().splitlines():
        parts = line.split()  # "k8s.io/kubernetes v1.36.3" in the require block, or after "require"
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) >= 2 and parts[0] == module:
            return parts[1]
    raise RuntimeError(f"{go_mod} requires no {module}")


def kube_version() -> str:
    """The k8s.io/kubernetes release go.mod requires."""
    return required(GO_MODULE / "go.mod", "k8s.io/kubernetes")


def jobset_version() -> str:
    return required(JOBSET_MODULE_DIR / "go.mod", JOBSET_MODULE)


def containerd_version() -> str:
    return required(CONTAINERD_MODULE_DIR / "go.mod", CONTAINERD_MODULE)


def coredns_version() -> str:
    return required(COREDNS_MODULE_DIR / "go.mod", COREDNS_MODULE)


def ldflags() -> str:
    """The release stamped into the Kubernetes binaries, as Kubernetes' own build does: without it the
    API server reports v0.0.0-master and Helm refuses charts with a kubeVersion constraint."""
    version = kube_version()
    major, minor = version.lstrip("v").split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(f"-X {pkg}.{k}={v}" for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
                    for k, v in values.items())
