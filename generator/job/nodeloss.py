"""The chart's nodeLossTolerationSeconds read back from pods: the two NoExecute tolerations it
renders (node.kubernetes.io/not-ready, then unreachable, each with the same seconds) at the end
of every pod's tolerations, where the chart puts them."""
from __future__ import annotations

VALUE = "nodeLossTolerationSeconds"
KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def tolerations(seconds: int) -> list[dict]:
    """What the chart renders for the value, in its order."""
    return [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds} for key in KEYS]


def names_a_key(toleration: dict) -> bool:
    """A toleration the chart refuses beside the value: one of the keys, for NoExecute (an empty
    effect is every effect)."""
    return toleration.get("key") in KEYS and toleration.get("effect", "") in ("", "NoExecute")


def split(pods_tolerations: list[list[dict]]) -> tuple[int | None, list[list[dict]]]:
    """(the value, each pod's tolerations without its two) when every pod's list ends in the chart's
    two with the same seconds and the rest names neither key; (None, the lists as given) otherwise,
    so that they import as plain tolerations."""
    found: set[int] = set()
    rests = []
    for given in pods_tolerations:
        if not all(isinstance(t, dict) for t in given):
            return None, pods_tolerations  # Kubernetes' schema check names what is wrong with it
        tail = given[-len(KEYS):]
        seconds = tail[0].get("tolerationSeconds") if len(tail) == len(KEYS) else None
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0 or tail != tolerations(seconds):
            return None, pods_tolerations
        rest = given[:-len(KEYS)]
        if any(names_a_key(t) for t in rest):
            return None, pods_tolerations
        found.add(seconds)
        rests.append(rest)
    if len(found) != 1:
        return None, pods_tolerations
    return found.pop(), rests
