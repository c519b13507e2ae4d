"""Storage for the local cluster: a default StorageClass and its provisioner, which answers each
claim of that class with a hostPath PersistentVolume, a folder under the cluster's directory.
The PV controller in kube-controller-manager binds them as it binds any volume; with the
claim deleted, the volume and its folder go (reclaimPolicy Delete)."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path

CLASS = "local-folder"
PROVISIONER = "pytorchjob-kit.io/local-folder"
POLL_SECONDS = 1.0


def storage_class() -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}


def volume_for(claim, folder: Path) -> dict:
    """The PersistentVolume that answers `claim`, pre-bound to it."""
    name = f"pvc-{claim.metadata.uid}"
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
            "spec": {"capacity": {"storage": claim.spec.resources.requests["storage"]},
                     "accessModes": claim.spec.access_modes, "persistentVolumeReclaimPolicy": "Delete",
                     "storageClassName": CLASS, "volumeMode": claim.spec.volume_mode or "Filesystem",
                     "hostPath": {"path": str(folder / name), "type": "DirectoryOrCreate"},
                     "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": claim.metadata.name,
                                  "namespace": claim.metadata.namespace, "uid": claim.metadata.uid}}}


class Provisioner(threading.Thread):
    def __init__(self, api, folder: Path, stopping: threading.Event):
        super().__init__(name="provisioner", daemon=True)
        self.api, self.folder, self.stopping = api, folder, stopping

    def run(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        while not self.stopping.wait(POLL_SECONDS):
            try:
                self._provision(core)
                self._reclaim(core)
            except Exception as exc:  # the API server restarting: the next round tries again
                print(f"provisioner: {exc}", flush=True)

    def _provision(self, core) -> None:
        from kubernetes import client

        for claim in core.list_persistent_volume_claim_for_all_namespaces().items:
            if claim.status.phase != "Pending" or claim.spec.storage_class_name != CLASS or claim.spec.volume_name:
                continue
            body = volume_for(claim, self.folder)
            folder = self.folder / body["metadata"]["name"]
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o777)  # as local-path provisioners make it: the pod's user writes, whoever it is
            try:
                core.create_persistent_volume(body)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise

    def _reclaim(self, core) -> None:
        for volume in core.list_persistent_volume().items:
            ours = (volume.metadata.annotations or {}).get("pv.kubernetes.io/provisioned-by") == PROVISIONER
            if ours and volume.status.phase == "Released" and volume.spec.persistent_volume_reclaim_policy == "Delete":
                shutil.rmtree(self.folder / volume.metadata.name, ignore_errors=True)
                core.delete_persistent_volume(volume.metadata.name)
