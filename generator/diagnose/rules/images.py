"""Images that cannot be pulled: the job's own, or the operator's init container's."""
from __future__ import annotations

from collections.abc import Iterator

from generator.diagnose.rules.common import ERROR, Diagnosis, pod_name, statuses
from generator.diagnose.snapshot import Snapshot
from generator.fixtext import operator_value, value

PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
INIT_IMAGE = operator_value("pytorchInitContainerImage")
IMAGE = f"{value('image.repository')}, {value('image.tag')} or {value('image.digest')}"
PULL_SECRETS = value("image.pullSecrets")


def _on_this_machine(shot: Snapshot, pod: dict) -> bool:
    """Whether the pod's node is the local cluster's real node (`cluster up`)."""
    from generator.controlplane.realnode import NODE_LABEL, NODE_LABEL_VALUE

    node = (pod.get("spec") or {}).get("nodeName")
    return any(n["metadata"]["name"] == node and (n["metadata"].get("labels") or {}).get(NODE_LABEL) == NODE_LABEL_VALUE
               for n in shot.nodes or [])


def images(shot: Snapshot) -> Iterator[Diagnosis]:
    for pod in shot.pods:
        for status in statuses(pod):
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") not in PULL_FAILURES:
                continue
            image = status.get("image", "")
            if status["name"] == shot.job_kind.init_container:
                fix = (f"the operator's init container image {image} cannot be pulled here: mirror it and set the "
                       f"operator chart's {INIT_IMAGE} (an image with `nslookup`, as alpine has)")
            elif _on_this_machine(shot, pod):
                fix = (f"the local cluster's node pulls from the registry on this machine, which lacks {image}: put it "
                       f"there with `python -m generator image load {image}` (from your engine's store or an archive, "
                       f"--as to rename), or lay your code over an image with `python -m generator cluster up --image "
                       f"{image}=DIR[:PATH]`; else check {IMAGE}")
            else:
                fix = f"check {IMAGE} (now {image}); for a private registry set {PULL_SECRETS}"
            yield Diagnosis(ERROR, f"Pod/{pod_name(pod)}", waiting["reason"],
                            f"container {status['name']}: {waiting.get('message') or 'the image cannot be pulled'}", fix)
