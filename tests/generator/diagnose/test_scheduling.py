"""The gang schedulers' PodGroups diagnose records for a job: found, known absent, or left out
where the kind is not served or may not be read; a bug in reading them surfaces."""
from __future__ import annotations

import pytest
from kubernetes.client import ApiException
from urllib3.exceptions import MaxRetryError

from generator.cluster import client as api
from generator.diagnose import scheduling


class Custom:
    """Custom objects as the API server answers for them: what each group answers to a get, and
    whether it serves podgroups at all (a list)."""

    def __init__(self, gets: dict, served: set[str]) -> None:
        self.gets, self.served = gets, served

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **_):
        answer = self.gets[group]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def list_namespaced_custom_object(self, group, version, namespace, plural, **_):
        if group not in self.served:
            raise ApiException(status=404, reason="Not Found")
        return {"items": []}


def cluster(custom: Custom) -> api.Cluster:
    return api.Cluster(core=None, custom=custom, namespace="team", server="https://127.0.0.1:6443")


VOLCANO, PLUGINS = (scheduling.POD_GROUP_APIS[s][0] for s in ("volcano", "scheduler-plugins"))


def test_pod_groups_record_found_none_and_unknown_by_scheduler():
    group = {"metadata": {"name": "mnist"}, "status": {"phase": "Pending"}}
    custom = Custom({VOLCANO: group, PLUGINS: ApiException(status=404, reason="Not Found")}, served={PLUGINS})
    assert scheduling.pod_groups(cluster(custom), "mnist") == {"volcano": group, "scheduler-plugins": None}
    # Not served, refused, or the server gone: left out, so no rule reads a PodGroup as missing.
    custom = Custom({VOLCANO: ApiException(status=404, reason="Not Found"),
                     PLUGINS: ApiException(status=403, reason="Forbidden")}, served=set())
    assert scheduling.pod_groups(cluster(custom), "mnist") == {}
    custom = Custom({VOLCANO: MaxRetryError(None, "/apis", "Connection refused"),
                     PLUGINS: ConnectionResetError(104, "Connection reset by peer")}, served=set())
    assert scheduling.pod_groups(cluster(custom), "mnist") == {}


def test_a_bug_reading_pod_groups_surfaces_instead_of_leaving_them_unknown():
    custom = Custom({VOLCANO: KeyError("metadata"), PLUGINS: {}}, served={VOLCANO, PLUGINS})
    with pytest.raises(KeyError, match="metadata"):
        scheduling.pod_groups(cluster(custom), "mnist")
