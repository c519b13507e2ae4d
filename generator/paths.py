"""Where the project's own files live: the one place every reader finds the charts, the schema, the
trainer's image recipe and the Go modules the cluster build uses, from a checkout or from an installed
wheel or sdist, whatever the working directory."""
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = PACKAGE.parent
# What a wheel carries inside the package, laid out as in a checkout: setup.py copies these there, and the
# trainer's image builds from them (its Dockerfile copies the files of .dockerignore's list).
BUNDLE = ("charts/pytorchjob", "charts/pytorch-operator", "trainer", "pyproject.toml", "constraints.txt", "README.md",
          ".dockerignore")
BUNDLED = PACKAGE / "_resources"
# A checkout (or an editable install of one) holds the charts beside the package; an installed wheel inside it.
IN_CHECKOUT = (_CHECKOUT / "charts" / "pytorchjob" / "Chart.yaml").is_file()
ROOT = _CHECKOUT if IN_CHECKOUT else BUNDLED
CHARTS = ROOT / "charts"
JOB_CHART = CHARTS / "pytorchjob"
OPERATOR_CHART = CHARTS / "pytorch-operator"
TRAINER_DOCKERFILE = ROOT / "trainer" / "Dockerfile"
SCHEMA = JOB_CHART / "values.schema.json"  # the top-level values.schema.json is a link to it
# The Go modules `cluster build` builds in, in one folder (package data of generator.controlplane, wheel or checkout).
GO_MODULES = PACKAGE / "controlplane" / "gomodules"


def go_module(name: str) -> Path:
    """The folder of one of the cluster build's Go modules: go (Kubernetes and etcd), containerd, coredns or jobset."""
    return GO_MODULES / name


def cache_dir() -> Path:
    """The user's cache for this tool: $PYTORCHJOB_KIT_CACHE, else the XDG cache folder. For root,
    who runs the binaries built there and keeps the registry's keys there, only a folder no other
    user could swap (generator/trusted.py)."""
    import os

    if os.environ.get("PYTORCHJOB_KIT_CACHE"):
        folder = Path(os.environ["PYTORCHJOB_KIT_CACHE"])
    else:
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytorchjob-kit"
    if os.geteuid() == 0:
        from generator import trusted

        folder = trusted.check(folder, "the cache folder", "set PYTORCHJOB_KIT_CACHE to a folder of root's own, "
                                                           "such as /root/.cache/pytorchjob-kit")
    return folder


def cluster_dir() -> Path:
    """A cluster's folder unless --dir says otherwise: per checkout (two clones must not share one cluster's
    folder by accident), and in the user's cache for an installed package, never in site-packages."""
    return ROOT / ".cache" / "cluster" if IN_CHECKOUT else cache_dir() / "cluster"
