"""containerd's files for the real node, as pure functions of its description: config.toml (its
own root, state and sockets, runc on cgroupfs, overlayfs, the pause image, the CNI bridge) and one
registry hosts file per registry name the machine's registry holds, in the TOML containerd reads."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from generator.controlplane import pins

if TYPE_CHECKING:
    from generator.controlplane.realnode.config import RealNode

# The read-only registry's CA and client pair, named as in its client folder (podman's and skopeo's --cert-dir).
REGISTRY_CLIENT_FILES = ("ca.crt", "client.cert", "client.key")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key).replace('"', "'")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def toml(table: dict, prefix: tuple[str, ...] = ()) -> str:
    """The TOML of nested tables of strings, booleans, integers and lists of them (all containerd's
    configuration needs); the standard library reads TOML but does not write it."""
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    lines = [f"[{'.'.join(_toml_key(p) for p in prefix)}]"] if prefix and (scalars or not tables) else []
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items()]
    text = "\n".join(lines) + ("\n" if lines else "")
    for key, sub in tables.items():
        text += ("\n" if text else "") + toml(sub, (*prefix, key))
    return text


def containerd_config(node: RealNode) -> str:
    """containerd v2 (config version 3): its own root, state and sockets under the node's folder,
    cgroupfs through runc, overlayfs, the pause image as sandbox, the CNI bridge, registry hosts."""
    f = node.folders
    return toml({
        "version": 3,
        "root": str(f.containerd / "root"),
        "state": str(f.containerd / "state"),
        # NRI would listen on /var/run/nri/nri.sock, the machine's one: nothing here uses it.
        "disabled_plugins": ["io.containerd.nri.v1.nri"],
        "grpc": {"address": str(f.socket)},
        "ttrpc": {"address": f"{f.socket}.ttrpc"},
        "debug": {"address": str(f.containerd / "debug.sock"), "level": "info"},
        "plugins": {
            # Its default is the machine's /opt/containerd.
            "io.containerd.internal.v1.opt": {"path": str(f.containerd / "opt")},
            "io.containerd.cri.v1.images": {
                "snapshotter": "overlayfs",
                # Imported at every start, never pulled, never collected.
                "pinned_images": {"sandbox": pins.PAUSE_IMAGE},
                # A layer's compressed blob goes once it is unpacked: the trainer's image is 3 GB of
                # blobs beside its 5 GB unpacked, in each cluster's containerd (the registry keeps them).
                "discard_unpacked_layers": True,
                "registry": {"config_path": str(f.registry_hosts)},
            },
            "io.containerd.cri.v1.runtime": {
                # Root here lacks CAP_SYS_RESOURCE: the kubelet's -998 for sandboxes cannot be written, so
                # containerd keeps every score at or above its own.
                "restrict_oom_score_adj": True,
                # Pods' network namespaces under the node's state, not the machine's /run/netns.
                "netns_mounts_under_state_dir": True,
                "enable_cdi": False,
                "containerd": {
                    "default_runtime_name": "runc",
                    "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2",
                                          # runc's state beside containerd's, not the machine's /run/containerd/runc.
                                          "options": {"BinaryName": str(node.runc), "SystemdCgroup": False,
                                                      "Root": str(f.containerd / "state" / "runc")}}},
                },
                "cni": {"bin_dirs": [str(f.cni_bin)], "conf_dir": str(f.cni_conf), "max_conf_num": 1},
            },
            # kubectl exec, attach and port-forward stream through here; loopback only, any free port.
            "io.containerd.grpc.v1.cri": {"stream_server_address": "127.0.0.1", "stream_server_port": "0"},
        },
    })


def host_directory(name: str) -> str:
    """The folder containerd looks up for a registry name: `host:port` is written `host_port_`."""
    host, sep, port = name.rpartition(":")
    return f"{host}_{port}_" if sep and port.isdigit() else name


def registry_hosts(node: RealNode) -> dict[Path, str]:
    """containerd's hosts file for each registry name the machine's registry holds images under:
    a pull of `ghcr.io/kubeflow/x:1` asks https://ADDRESS/v2/ghcr.io/kubeflow/x/... (the
    registry keeps each image under its full upstream name, so the name's registry is a part of
    the path, and `override_path` keeps containerd from adding its own /v2), at the read-only
    registry, with its CA and client certificate (pull only: the node's key changes nothing).
    Only then, as for any mirror, the name's own registry, where this machine reaches it.
    `_default` cannot serve here: its hosts file is the same for every name, and the name is what
    the path must carry."""
    if node.mirror is None:
        return {}
    client = node.folders.registry_client
    ca, cert, key = (str(client / name) for name in REGISTRY_CLIENT_FILES)
    return {node.folders.registry_hosts / host_directory(name) / "hosts.toml": toml({"host": {
        f"https://{node.mirror.address}/v2/{name}": {"capabilities": ["pull", "resolve"], "ca": ca,
                                                      "client": [[cert, key]], "override_path": True}}})
        for name in node.mirror.names}
