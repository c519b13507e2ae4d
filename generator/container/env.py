"""A container's environment as the kubelet makes it, for `generator run`: envFrom, then env in
order with `$(VAR)` references expanded, the downward API, and
Secret and ConfigMap keys, read from the API server on the node (Sources) and from the shell's
variables of the same name under `generator run` (ShellSources)."""
from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal

from generator.errors import Finding
from generator.job import quantity


class ConfigError(Exception):
    """A reference that cannot be resolved yet: the kubelet's CreateContainerConfigError."""


_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """$(VAR) becomes VAR's value when VAR is defined and stays as written otherwise; $$ is a
    literal $, so $$(VAR) is the text $(VAR)."""
    def sub(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REF.sub(sub, text)


def field(pod: dict, path: str) -> str:
    meta, status, spec = pod["metadata"], pod.get("status") or {}, pod["spec"]
    simple = {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", "default"),
              "metadata.uid": meta.get("uid", ""), "spec.nodeName": spec.get("nodeName", ""),
              "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
              "status.hostIP": status.get("hostIP", ""), "status.podIP": status.get("podIP", ""),
              "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or []),
              "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or [])}
    if path in simple:
        return simple[path]
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return (meta.get(match.group(1)) or {}).get(match.group(2), "")
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise ConfigError(f'fieldRef "{path}" is not a field the downward API offers')


def resource(pod: dict, ref: dict, node_allocatable: dict[str, str]) -> str:
    """resourceFieldRef: a limit (the node's allocatable when unset) or a request, in the divisor's units, rounded up."""
    container = next((c for c in pod["spec"]["containers"] if c["name"] == ref.get("containerName")), None)
    kind, _, name = ref["resource"].partition(".")
    resources = (container or {}).get("resources") or {}
    value = (resources.get(kind) or {}).get(name)
    if value is None:
        value = node_allocatable.get(name, "0") if kind == "limits" else "0"
    divisor = quantity.parse(str(ref.get("divisor") or "1"))
    amount = (quantity.parse(str(value)) / (divisor or Decimal(1))).to_integral_value(ROUND_CEILING)
    return str(int(amount))


class Sources:
    """Secrets and ConfigMaps of one namespace, read once per container start."""

    def __init__(self, core, namespace: str):
        self.core, self.namespace = core, namespace
        self.cache: dict[tuple[str, str], dict[str, str] | None] = {}

    def data(self, kind: str, name: str) -> dict[str, str] | None:
        from kubernetes import client

        key = (kind, name)
        if key not in self.cache:
            try:
                if kind == "secret":
                    obj = self.core.read_namespaced_secret(name, self.namespace)
                    self.cache[key] = {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.data or {}).items()}
                else:
                    obj = self.core.read_namespaced_config_map(name, self.namespace)
                    self.cache[key] = dict(obj.data or {})
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
                self.cache[key] = None
        return self.cache[key]

    def key(self, kind: str, ref: dict, variable: str = "", where: str = "") -> str | None:
        data = self.data(kind, ref["name"])
        if data is None:
            if ref.get("optional"):
                return None
            raise ConfigError(f'{kind} "{ref["name"]}" not found')
        if ref["key"] not in data:
            if ref.get("optional"):
                return None
            raise ConfigError(f"couldn't find key {ref['key']} in {kind.capitalize()} {self.namespace}/{ref['name']}")
        return data[ref["key"]]


class ShellSources:
    """`generator run`'s Secrets and ConfigMaps: this machine has no cluster to read them from, so
    a variable that comes from one takes the shell's variable of the same name. What the shell
    lacks is collected as a finding (all of them at once), not raised."""

    def __init__(self, where: str, environ: Mapping[str, str] | None = None):
        self.where, self.environ = where, os.environ if environ is None else environ
        self.problems: list[Finding] = []

    def data(self, kind: str, name: str) -> dict[str, str]:
        return {}  # envFrom names no variables to look for; the plan tells the user to export them

    def key(self, kind: str, ref: dict, variable: str = "", where: str = "") -> str | None:
        if variable in self.environ:
            return self.environ[variable]
        if not ref.get("optional"):
            label = "Secret" if kind == "secret" else "ConfigMap"
            self.problems.append(Finding(f"{self.where}.{where}", f"comes from {label} {ref.get('name')}/{ref.get('key')}, "
                                         "which only a cluster has", variable,
                                         f"export {variable}=... in this shell to run locally"))
        return None


def container_env(pod: dict, container: dict, base: dict[str, str], sources: Sources | ShellSources,
                  node_allocatable: dict[str, str]) -> dict[str, str]:
    """envFrom first, then env in order, each value expanded against what came before it."""
    env = dict(base)
    for source in container.get("envFrom") or []:
        kind = "secret" if "secretRef" in source else "configMap"
        ref = source.get("secretRef") or source.get("configMapRef") or {}
        data = sources.data(kind, ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind} "{ref.get("name")}" not found')
        for key, value in data.items():
            env[source.get("prefix", "") + key] = value
    for j, item in enumerate(container.get("env") or []):
        source = item.get("valueFrom")
        if source is None:
            env[item["name"]] = expand(str(item.get("value", "")), env)
            continue
        if "fieldRef" in source:
            value = field(pod, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            value = resource(pod, {"containerName": container["name"], **source["resourceFieldRef"]}, node_allocatable)
        elif "secretKeyRef" in source:
            value = sources.key("secret", source["secretKeyRef"], item["name"], f"env[{j}]")
        elif "configMapKeyRef" in source:
            value = sources.key("configMap", source["configMapKeyRef"], item["name"], f"env[{j}]")
        else:
            raise ConfigError(f"env {item['name']}: valueFrom {sorted(source)} is not supported")
        if value is not None:
            env[item["name"]] = value
    return env
