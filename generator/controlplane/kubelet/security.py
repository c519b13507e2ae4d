"""A container's securityContext (pod and container level) as this node applies it: the user,
groups and capabilities it runs with, no_new_privs, a read-only root, the volume group (fsGroup);
the refusal a kubelet gives `runAsNonRoot` with a root user; and the fields this node cannot
honour, for the pod's event. A pod that sets no securityContext runs as the node always ran it
(root, every capability); one that sets any runs as a kubelet would run it. Applied by enter.py,
the container's first process, in itself, right before it execs the container's program."""
from __future__ import annotations

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

    def dropped(self) -> list[int]:
        """The capabilities (by number) to take out of the bounding set: `-all` then `+name` keeps
        only the names added back."""
        drop: set[int] = set()
        for change in self.bounding:
            cap = CAPABILITIES.index(change[1:]) if change[1:] != "all" else None
            if change[0] == "-":
                drop |= set(range(len(CAPABILITIES))) if cap is None else {cap}
            elif cap is not None:
                drop.discard(cap)
        return sorted(drop)

    def spec(self) -> dict:
        """This identity as enter.py applies it."""
        return {"uid": self.uid, "gid": self.gid, "groups": list(self.groups), "drop": self.dropped(),
                "no_new_privs": self.no_new_privs}


class CapabilityError(Exception):
    """A capability name Linux does not have, as a runtime refuses it."""


# Linux's capabilities, by number (linux/capability.h).
CAPABILITIES = ("chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
                "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw", "ipc_lock", "ipc_owner",
                "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot",
                "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write",
                "audit_control", "setfcap", "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend",
                "audit_read", "perfmon", "bpf", "checkpoint_restore")


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
    gid = int(group) if group is not None else _group_of(int(user), program.user) if user is not None else image_gid
    groups = [pod_sc["fsGroup"]] if pod_sc.get("fsGroup") is not None else []
    groups += [g for g in pod_sc.get("supplementalGroups") or [] if g not in groups]
    caps = sc.get("capabilities") or {}
    drop = [_cap(c) for c in caps.get("drop") or []]
    add = [_cap(c) for c in caps.get("add") or []]
    unknown = [c for c in drop + add if c != "all" and c not in CAPABILITIES]
    if unknown:
        raise CapabilityError(f'securityContext.capabilities names "{unknown[0]}", which is not a Linux capability '
                              f"(container {container.get('name', '')}); write one of {', '.join(CAPABILITIES)}, "
                              "with or without CAP_, or ALL")
    bounding = (["-all"] if "all" in drop else [f"-{c}" for c in drop]) + [f"+{c}" for c in add if c != "all"]
    if sc.get("privileged"):
        bounding = []
    no_new_privs = sc.get("allowPrivilegeEscalation") is False and not sc.get("privileged")
    return Identity(uid, gid, tuple(int(g) for g in groups), no_new_privs, tuple(bounding),
                    bool(sc.get("readOnlyRootFilesystem")))


def _group_of(uid: int, image: tuple[int, int]) -> int:
    """The group of a runAsUser without runAsGroup. A runtime takes it from the image's
    /etc/passwd, and gid 0 for a user the image does not list; this node has no image, and gid 0
    is this machine's root group. So: the image's group for the image's own user, else the group
    whose number is the user's (the convention of one private group per user, as useradd makes
    them): it gives the process no group its uid does not already stand for here, where a shared
    group such as 65534 (nogroup) would put every such pod's files in one group."""
    image_uid, image_gid = image
    return image_gid if uid == image_uid else uid


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
