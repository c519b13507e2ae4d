"""A pod's volumes as folders. emptyDir is a folder of the pod's own; a PersistentVolumeClaim is
its bound volume's folder; Secret, ConfigMap, downward-API and projected volumes (the
service-account token among them) are files written from the API and kept current."""
from __future__ import annotations

import base64
import os
import shutil
import time
from pathlib import Path

from generator.container.env import ConfigError, field
from generator.container.ownership import own as _own
from generator.container.ownership import own_tree as _own_tree

TOKEN_REFRESH = 0.8  # renew a token once 80% of its life is gone, as the kubelet does


class MountError(Exception):
    """Reads like the kubelet's FailedMount event."""


def _write(folder: Path, files: dict[str, tuple[bytes, int]], group: int | None = None) -> None:
    """Files replaced one by one with a rename, so a reader sees an old or a new file, never half of
    one; each born with its final mode, and never written through a link a pod left in the folder.
    With `group` (the pod's fsGroup) files belong to it and its members may read them, as a kubelet
    sets a read-only volume's ownership."""
    folder.mkdir(parents=True, exist_ok=True)
    if group is not None:
        _own(folder, group, 0o2550)
    root = folder.resolve()
    for rel, (data, mode) in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        parent = target.parent.resolve()
        if parent != root and root not in parent.parents:
            raise MountError(f'"{rel}" leads out of the volume\'s folder; a key\'s path must stay inside it')
        target = parent / target.name
        if group is not None:
            mode |= 0o440
            if target.parent != folder:
                _own(target.parent, group, 0o2550)
        if not target.is_symlink() and target.is_file() and target.read_bytes() == data:
            continue
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as out:
            if group is not None:
                os.fchown(fd, -1, group)
            os.fchmod(fd, mode)  # the umask narrows the mode open() was given
            out.write(data)
        os.replace(tmp, target)  # replaces a link itself, never what it points to


class Volumes:
    def __init__(self, core, pod: dict, folder: Path, host_root: Path):
        self.core, self.pod, self.folder = core, pod, folder
        self.host_root = host_root  # the one host folder pods may reach: the provisioner's
        self.namespace = pod["metadata"].get("namespace", "default")
        self.paths: dict[str, Path] = {}
        self.token_due: dict[str, float] = {}

    @property
    def fs_group(self) -> int | None:
        group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
        return None if group is None else int(group)

    def setup(self) -> dict[str, Path]:
        """volume name -> folder; MountError names what is missing, and the caller tries again."""
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            if name not in self.paths:
                self.paths[name] = self._mount(volume)
        return self.paths

    def refresh(self) -> None:
        """Secrets, ConfigMaps and tokens change; their folders follow."""
        for volume in self.pod["spec"].get("volumes") or []:
            if volume["name"] in self.paths and _kind(volume) in ("secret", "configMap", "projected", "downwardAPI"):
                try:
                    self._files(volume, self.paths[volume["name"]])
                except (MountError, ConfigError):
                    pass  # keep the last good content, as the kubelet does

    def _mount(self, volume: dict) -> Path:
        kind = _kind(volume)
        own = self.folder / "volumes" / volume["name"]
        if kind == "emptyDir":
            own.mkdir(parents=True, exist_ok=True)
            own.chmod(0o777)  # as a kubelet makes it: any user of the pod writes there
            if self.fs_group is not None:
                _own(own, self.fs_group, 0o2777)
            return own.resolve()  # mounted by this path, with no link in it: one that appears later is refused
        if kind == "persistentVolumeClaim":
            path = self._claim(volume["persistentVolumeClaim"]["claimName"])
            if self.fs_group is not None:
                _own_tree(path, self.fs_group)
            return path
        if kind == "hostPath":
            path = self._host_folder(volume["hostPath"]["path"], f'hostPath volume "{volume["name"]}"')
            if volume["hostPath"].get("type") in ("DirectoryOrCreate",):
                path.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                raise MountError(f'hostPath "{path}" does not exist on this machine')
            return path
        if kind in ("secret", "configMap", "projected", "downwardAPI"):
            self._files(volume, own)
            return own.resolve()
        raise MountError(f'volume "{volume["name"]}": {kind} volumes are not supported by the process node; '
                         "use emptyDir, persistentVolumeClaim, hostPath, secret, configMap, downwardAPI or projected")

    def _claim(self, claim: str) -> Path:
        from kubernetes import client

        try:
            pvc = self.core.read_namespaced_persistent_volume_claim(claim, self.namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                raise MountError(f'persistentvolumeclaim "{claim}" not found') from None
            raise
        if pvc.status.phase != "Bound" or not pvc.spec.volume_name:
            raise MountError(f'persistentvolumeclaim "{claim}" is not bound yet ({pvc.status.phase})')
        pv = self.core.read_persistent_volume(pvc.spec.volume_name)
        source = pv.spec.host_path or pv.spec.local
        if source is None:
            raise MountError(f'persistentvolume "{pv.metadata.name}" is not a folder on this machine')
        path = self._host_folder(source.path, f'persistentvolume "{pv.metadata.name}"')
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _host_folder(self, raw: str, what: str) -> Path:
        """Pods run as root on this machine: a host path outside the provisioner's folder (links
        followed) would hand them the machine, so it is refused as a failed mount."""
        path, root = Path(raw).resolve(), self.host_root.resolve()
        if path != root and root not in path.parents:
            raise MountError(f'{what}: "{raw}" is outside {root}, the only host folder this node mounts (pods run as '
                             "root here); use a persistentVolumeClaim of the local-folder class, or emptyDir")
        return path

    # --- keyed volumes ---------------------------------------------------------------------
    def _files(self, volume: dict, folder: Path) -> None:
        kind = _kind(volume)
        spec = volume[kind]
        default_mode = spec.get("defaultMode", 0o644)
        files: dict[str, tuple[bytes, int]] = {}
        if kind == "projected":
            for source in spec.get("sources") or []:
                files.update(self._source(volume["name"], source, default_mode))
        else:
            files.update(self._source(volume["name"], {kind: spec}, default_mode))
        _write(folder, files, self.fs_group)

    def _source(self, volume: str, source: dict, default_mode: int) -> dict[str, tuple[bytes, int]]:
        if "serviceAccountToken" in source:
            return self._token(volume, source["serviceAccountToken"], default_mode)
        if "downwardAPI" in source:
            items = source["downwardAPI"].get("items") or []
            return {i["path"]: (field(self.pod, i["fieldRef"]["fieldPath"]).encode(), i.get("mode", default_mode))
                    for i in items if "fieldRef" in i}
        kind = "secret" if "secret" in source else "configMap"
        spec = source[kind]
        name = spec.get("secretName") or spec.get("name")
        data = self._data(kind, name)
        if data is None:
            if spec.get("optional"):
                return {}
            raise MountError(f'{kind.lower()} "{name}" not found')
        items = spec.get("items")
        if not items:
            return {k: (v, default_mode) for k, v in data.items()}
        out = {}
        for item in items:
            if item["key"] not in data:
                if spec.get("optional"):
                    continue
                raise MountError(f"{kind} {self.namespace}/{name} has no key {item['key']}")
            out[item["path"]] = (data[item["key"]], item.get("mode", default_mode))
        return out

    def _data(self, kind: str, name: str) -> dict[str, bytes] | None:
        from kubernetes import client

        try:
            if kind == "secret":
                obj = self.core.read_namespaced_secret(name, self.namespace)
                return {k: base64.b64decode(v) for k, v in (obj.data or {}).items()}
            obj = self.core.read_namespaced_config_map(name, self.namespace)
            return {k: v.encode() for k, v in (obj.data or {}).items()} | \
                   {k: base64.b64decode(v) for k, v in (obj.binary_data or {}).items()}
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _token(self, volume: str, spec: dict, mode: int) -> dict[str, tuple[bytes, int]]:
        """A TokenRequest bound to this pod: it dies with the pod, as a projected token does."""
        key = f"{volume}/{spec['path']}"
        if time.time() < self.token_due.get(key, 0):
            return {}
        meta = self.pod["metadata"]
        seconds = int(spec.get("expirationSeconds") or 3600)
        request = {"spec": {"audiences": [spec["audience"]] if spec.get("audience") else [],
                            "expirationSeconds": seconds,
                            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}}
        answer = self.core.create_namespaced_service_account_token(
            self.pod["spec"].get("serviceAccountName") or "default", self.namespace, request)
        self.token_due[key] = time.time() + seconds * TOKEN_REFRESH
        return {spec["path"]: (answer.status.token.encode(), mode)}

    def remove(self) -> None:
        """The pod's own folders go with it; claims and host paths stay."""
        shutil.rmtree(self.folder / "volumes", ignore_errors=True)


def _kind(volume: dict) -> str:
    return next((k for k in volume if k != "name"), "emptyDir")
