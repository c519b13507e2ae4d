"""Kubernetes' own rules on what every kind of job holds: names, resource quantities and a pod
template with its training container. Each broken rule becomes a Finding."""
from __future__ import annotations

import re

from generator.errors import Finding
from generator.job import quantity

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RELEASE_MAX = 53  # Helm's cap: its objects' names add suffixes to the release's
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "storage"}

def name_problem(kind: str, name: str) -> str:
    """'' when `name` is a valid Helm release or Kubernetes namespace name, else why not."""
    limit, pattern = (RELEASE_MAX, DNS_SUBDOMAIN) if kind == "release" else (63, DNS_LABEL)
    if len(name) > limit:
        return f"is {len(name)} characters, more than the {limit} a {kind} name may have"
    if kind == "namespace" and "." in name and DNS_SUBDOMAIN.fullmatch(name):
        return "has a '.': a namespace is a DNS-1123 label, not a subdomain, so it is letters, digits and '-' alone"
    if not pattern.fullmatch(name):  # fullmatch: `$` alone would also take a name that ends in a newline
        return ("must be lower-case letters, digits and '-'" + (", in parts joined by '.'" if kind == "release" else "")
                + ", starting and ending with a letter or digit")
    return ""


def check_resources(resources: object, path: str, role: str = "") -> list[Finding]:
    """Quantities parse and are not negative; limits >= requests; extended resources request = limit.
    role ("master", "worker") only names the pod in the messages."""
    on = f" on the {role}" if role else ""
    if resources in (None, {}):
        return []
    if not isinstance(resources, dict):
        return [Finding(path, "must be a mapping with requests and limits", resources)]
    parsed: dict[str, dict[str, object]] = {}
    out: list[Finding] = []
    for kind in ("requests", "limits"):
        parsed[kind] = {}
        for name, raw in (resources.get(kind) or {}).items():
            try:
                value = quantity.parse(raw)
            except ValueError:
                out.append(Finding(f"{path}.{kind}.{name}", "is not a valid quantity", raw, quantity.HINT))
                continue
            if value < 0:
                out.append(Finding(f"{path}.{kind}.{name}", "must not be negative", raw, "use 0 or a positive quantity"))
                continue
            parsed[kind][name] = value
    requests, limits = parsed["requests"], parsed["limits"]
    for name, request in requests.items():
        if name in limits and limits[name] < request:
            out.append(Finding(f"{path}.limits.{name}", f"is below the {role + ' ' if role else ''}request {resources['requests'][name]}",
                               resources["limits"][name], f"raise limits.{name} or lower requests.{name}"))
        if is_extended(name):
            if name not in limits:
                out.append(Finding(f"{path}.requests.{name}", f"is an extended resource without a limit{on}", resources["requests"][name],
                                   f"set limits.{name} to the same value (a limit alone is enough)"))
            elif limits[name] > request:
                out.append(Finding(f"{path}.requests.{name}", "must equal the limit for an extended resource",
                                   resources["requests"][name], f"set both to {resources['limits'][name]}"))
    return out


def is_extended(name: str) -> bool:
    return name not in STANDARD_RESOURCES and not name.startswith("hugepages-") and "/" in name \
        and not name.startswith("kubernetes.io/")


def check_pod(template: object, base: str, role: str, main: str) -> list[Finding]:
    """A pod template's rules; `main` is the training container's name (pytorch, or Trainer v2's node)."""
    pod = (template or {}).get("spec") if isinstance(template, dict) else None
    if not isinstance(pod, dict):
        return [Finding(f"{base}.spec", "is missing", None, f"add a pod template with a container named {main}")]
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        return [Finding(f"{base}.spec.containers", "must list at least one container", containers,
                        f"add a container named {main} with an image")]
    out = []
    if not any(isinstance(c, dict) and c.get("name") == main for c in containers):
        out.append(Finding(f"{base}.spec.containers", f"has no container named {main}", [c.get("name") for c in containers if isinstance(c, dict)],
                           f"name the training container {main}"))
    for i, container in enumerate(containers):
        cpath = f"{base}.spec.containers[{i}]"
        if not isinstance(container, dict):
            out.append(Finding(cpath, "must be a mapping", container))
            continue
        if not container.get("image"):
            out.append(Finding(f"{cpath}.image", "is missing", container.get("image"), "set the container image"))
        out += check_resources(container.get("resources"), f"{cpath}.resources", role)
        for j, port in enumerate(container.get("ports") or []):
            number = port.get("containerPort") if isinstance(port, dict) else None
            if not isinstance(number, int) or not 1 <= number <= 65535:
                out.append(Finding(f"{cpath}.ports[{j}].containerPort", "is not a TCP port", number, "use 1-65535"))
        for j, mount in enumerate(container.get("volumeMounts") or []):
            for key in ("subPath", "subPathExpr"):
                value = mount.get(key) if isinstance(mount, dict) else None
                if isinstance(value, str) and value and (value.startswith("/") or ".." in value.split("/")):
                    out.append(Finding(f"{cpath}.volumeMounts[{j}].{key}", "must be a relative path inside the volume",
                                       value, "drop the leading / and every '..': Kubernetes refuses both"))
    for i, volume in enumerate(pod.get("volumes") or []):
        if not isinstance(volume, dict):
            continue
        vpath = f"{base}.spec.volumes[{i}]"
        if not isinstance(volume.get("name"), str) or not DNS_LABEL.fullmatch(volume["name"]):
            out.append(Finding(f"{vpath}.name", "is not a DNS label", volume.get("name"),
                               "use lower-case letters, digits and '-', at most 63, as Kubernetes requires"))
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName") if isinstance(
            volume.get("persistentVolumeClaim"), dict) else None
        if claim is not None and (not isinstance(claim, str) or not DNS_SUBDOMAIN.fullmatch(claim)):
            out.append(Finding(f"{vpath}.persistentVolumeClaim.claimName", "is not a claim name", claim,
                               "use the name of a PersistentVolumeClaim: lower-case letters, digits, '-' and '.'"))
    return out
