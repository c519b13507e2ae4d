"""A container's securityContext (pod and container level) as this node applies it: the user,
groups and capabilities it runs with, no_new_privs, a read-only root, the volume group (fsGroup);
the refusal a kubelet gives `runAsNonRoot` with a root user; and the fields this node cannot
honour, for the pod's event. A pod that sets no securityContext runs as the node always ran it
(root, every capability); one that sets any runs as a kubelet would run it. Applied by
util-linux's setpriv, the last exec before the container's program."""
from __future__ import annotations

import shutil
from dataclasses import dataclass

from generator.container import programs

# Fields a kubelet honours that this node does not, at pod and container level (the README lists them).
UNHONOURED_POD = ("seccompProfile", "seLinuxOptions", "appArmorProfile", "sysctls", "windowsOptions",
                  "supplementalGroupsPolicy", "seLinuxChangePolicy")
UNHONOURED_CONTAINER = ("seccompProfile", "seLinuxOptions", "appArmorProfile", "windowsOptions", "procMount")


class NonRootError(Exception):
    """The kubelet's CreateContainerConfigError for runAsNonRoot."""


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary: fsGroup first, then supplementalGroups
    no_new_privs: bool
    bounding: tuple[str, ...]  # setpriv --bounding-set changes (-all, +net_bind_service, -net_raw, ...)
    read_only_root: bool

    def argv(self) -> list[str]:
        """The setpriv command line that turns the kubelet's root process into this identity."""
        out = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}"]
        out.append(f"--groups={','.join(map(str, self.groups))}" if self.groups else "--clear-groups")
        if self.bounding:
            out += [f"--bounding-set={','.join(self.bounding)}", "--inh-caps=-all"]
        if self.no_new_privs:
            out.append("--no-new-privs")
        return [*out, "--"]


def contexts(pod_spec: dict, container: dict) -> tuple[dict, dict]:
    return pod_spec.get("securityContext") or {}, container.get("securityContext") or {}


def _cap(name: str) -> str:
    name = name.lower()
    return name[4:] if name.startswith("cap_") else name


def identity(pod_spec: dict, container: dict, program: programs.Program, pod: str) -> Identity | None:
    """None when neither the pod nor the container sets a securityContext (the node's old behaviour);
    raises NonRootError as a kubelet refuses a root user under runAsNonRoot. `pod`: name_namespace(uid)."""
    pod_sc, sc = contexts(pod_spec, container)
    if not pod_sc and not sc:
        return None

    def pick(key: str):
        return sc[key] if sc.get(key) is not None else pod_sc.get(key)

    image_uid, image_gid = program.user
    user, group = pick("runAsUser"), pick("runAsGroup")
    if pick("runAsNonRoot"):
        name = container.get("name", "")
        if user == 0:
            raise NonRootError(f'container\'s runAsUser breaks non-root policy (pod: "{pod}", container: {name})')
        if user is None and image_uid == 0:
            raise NonRootError(f'container has runAsNonRoot and image will run as root (pod: "{pod}", container: {name})')
    uid = image_uid if user is None else int(user)
    gid = (image_gid if user is None else 0) if group is None else int(group)
    groups = [pod_sc["fsGroup"]] if pod_sc.get("fsGroup") is not None else []
    groups += [g for g in pod_sc.get("supplementalGroups") or [] if g not in groups]
    caps = sc.get("capabilities") or {}
    drop = [_cap(c) for c in caps.get("drop") or []]
    add = [_cap(c) for c in caps.get("add") or []]
    bounding = (["-all"] if "all" in drop else [f"-{c}" for c in drop]) + [f"+{c}" for c in add if c != "all"]
    if sc.get("privileged"):
        bounding = []
    no_new_privs = sc.get("allowPrivilegeEscalation") is False and not sc.get("privileged")
    return Identity(uid, gid, tuple(int(g) for g in groups), no_new_privs, tuple(bounding),
                    bool(sc.get("readOnlyRootFilesystem")))


def unhonoured(pod_spec: dict, container: dict) -> list[str]:
    """What of the securityContext this node does not apply, as field paths for the pod's event."""
    pod_sc, sc = contexts(pod_spec, container)
    out = [f"spec.securityContext.{k}" for k in UNHONOURED_POD if pod_sc.get(k)]
    out += [f"securityContext.{k}" for k in UNHONOURED_CONTAINER if sc.get(k)]
    who = sc.get("runAsUser", pod_sc.get("runAsUser"))
    if (sc.get("capabilities") or {}).get("add") and who not in (None, 0):
        # A non-root process keeps no capability across exec without ambient capabilities.
        out.append("securityContext.capabilities.add (for a non-root user)")
    return out


def available() -> bool:
    return shutil.which("setpriv") is not None
