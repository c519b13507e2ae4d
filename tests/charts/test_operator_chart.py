"""What charts/pytorch-operator installs, checked object by object and against each other."""
import json

import pytest
import yaml

from generator import helm, paths
from generator.errors import UserError
from tests.support import chartdoc

CHART = paths.OPERATOR_CHART


def render(values=None, namespace="kubeflow"):
    return helm.render_objects(CHART, values or {}, "training", namespace)


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def one(objects, kind, name=None):
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def operator_container(objects):
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def args(objects):
    return operator_container(objects)["args"]


def rules(objects, name="training-pytorch-operator"):
    """(apiGroup, resource, verb) triples the operator's ClusterRole grants."""
    role = one(objects, "ClusterRole", name)
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def expand(group, resources, verbs):
    return {(group, r, v) for r in resources for v in verbs}


ALL = ["create", "delete", "get", "list", "patch", "update", "watch"]
PYTORCH_RULES = (
    expand("", ["pods"], ALL)
    | expand("", ["services"], ["create", "delete", "get", "list", "watch"])
    | expand("", ["events"], ["create", "get", "list", "patch", "update", "watch"])
    | expand("admissionregistration.k8s.io", ["validatingwebhookconfigurations"], ["get", "list", "update", "watch"])
    | expand("autoscaling", ["horizontalpodautoscalers"], ALL)
    | expand("kubeflow.org", ["pytorchjobs"], ALL)
    | expand("kubeflow.org", ["pytorchjobs/status"], ["get", "patch", "update"])
    | expand("kubeflow.org", ["pytorchjobs/finalizers"], ["update"])
)


def test_defaults_install_v1_9_4_for_pytorch_only():
    objects = render()
    c = operator_container(objects)
    assert c["image"] == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
    assert c["command"] == ["/manager"]
    assert [a for a in c["args"] if a.startswith("--enable-scheme")] == ["--enable-scheme=pytorchjob"]
    assert "--pytorch-init-container-image=alpine:3.10" in c["args"]
    assert "--kube-api-qps=20" in c["args"] and "--kube-api-burst=30" in c["args"]
    assert not any(a.startswith(("--leader-elect", "--namespace", "--gang-scheduler-name")) for a in c["args"])
    assert {"name": "MY_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in c["env"]
    assert {"name": "MY_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c["env"]
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"] == "1.9.4"
    assert not by_kind(objects, "Namespace") and not by_kind(objects, "PodDisruptionBudget")
    assert [r["metadata"]["name"] for r in by_kind(objects, "Role")] == ["training-pytorch-operator-webhook-cert"]
    assert not by_kind(objects, "ServiceMonitor")


def test_rbac_is_exactly_what_the_pytorch_controller_uses():
    assert rules(render()) == PYTORCH_RULES
    # Certificate rotation may write only the operator's own webhook configuration, cluster-wide...
    writes = [r for r in one(render(), "ClusterRole", "training-pytorch-operator")["rules"] if "update" in r["verbs"]
              and set(r["resources"]) & {"secrets", "validatingwebhookconfigurations"}]
    assert [r["resourceNames"] for r in writes] == [["validator.training-operator.kubeflow.org"]]
    # ...and read and fill in its own Secret, in its own namespace: no other Secret anywhere.
    role = one(render(), "Role", "training-pytorch-operator-webhook-cert")
    assert role["metadata"]["namespace"] == "kubeflow"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": ["training-pytorch-operator-webhook-cert"], "verbs": ["get", "update"]},
                             {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}]
    role_binding = one(render(), "RoleBinding", "training-pytorch-operator-webhook-cert")
    assert role_binding["subjects"] == [{"kind": "ServiceAccount", "name": "training-pytorch-operator",
                                         "namespace": "kubeflow"}]
    assert not any("secrets" in rule["resources"] for role in by_kind(render(), "ClusterRole") for rule in role["rules"])
    binding = one(render(), "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "training-pytorch-operator", "namespace": "kubeflow"}]
    assert binding["roleRef"]["name"] == "training-pytorch-operator"


def test_webhook_secret_service_configuration_and_deployment_agree():
    objects = render()
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    c = pod["containers"][0]
    secret = one(objects, "Secret")
    # Empty, and not kept: `helm uninstall` leaves nothing; an upgrade leaves the data the operator wrote.
    assert "annotations" not in secret["metadata"] and "data" not in secret
    assert f"--webhook-secret-name={secret['metadata']['name']}" in c["args"]
    cert_volume = next(v for v in pod["volumes"] if v["name"] == "cert")
    assert cert_volume["secret"]["secretName"] == secret["metadata"]["name"]
    assert {"name": "cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs", "readOnly": True} in c["volumeMounts"]

    service = one(objects, "Service", "training-pytorch-operator")
    assert f"--webhook-service-name={service['metadata']['name']}" in c["args"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443
    container_port = next(p for p in c["ports"] if p["name"] == port["targetPort"])
    assert container_port["containerPort"] == 9443
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()

    vwc = one(objects, "ValidatingWebhookConfiguration")
    assert vwc["metadata"]["name"] == "validator.training-operator.kubeflow.org"
    (hook,) = vwc["webhooks"]
    assert hook["clientConfig"]["service"] == {"name": service["metadata"]["name"], "namespace": "kubeflow",
                                               "port": 443, "path": "/validate-kubeflow-org-v1-pytorchjob"}
    assert hook["rules"] == [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                              "resources": ["pytorchjobs"], "scope": "Namespaced"}]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert one(render({"webhook": {"failurePolicy": "Ignore"}}), "ValidatingWebhookConfiguration")["webhooks"][0]["failurePolicy"] == "Ignore"


def test_hardened_by_default_with_probes_on_8081():
    objects = render()
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    health = next(p for p in c["ports"] if p["name"] == "health")["containerPort"]
    assert health == 8081
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"] == "1Gi"
    assert one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"


def test_tencent_values_render_the_namespace_and_put_everything_in_it():
    objects = render({"image": {"repository": "ccr.ccs.tencentyun.com/tke-market/pytorch-operator", "tag": "latest"},
                      "namespace": {"create": True, "name": "pytorch-operator"}}, namespace="default")
    assert one(objects, "Namespace")["metadata"]["name"] == "pytorch-operator"
    assert operator_container(objects)["image"] == "ccr.ccs.tencentyun.com/tke-market/pytorch-operator:latest"
    namespaced = [o for o in objects if o["kind"] not in {"Namespace", "CustomResourceDefinition", "ClusterRole",
                                                            "ClusterRoleBinding", "ValidatingWebhookConfiguration"}]
    assert namespaced and {o["metadata"]["namespace"] for o in namespaced} == {"pytorch-operator"}
    assert one(objects, "ClusterRoleBinding")["subjects"][0]["namespace"] == "pytorch-operator"
    assert one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["service"]["namespace"] == "pytorch-operator"


def test_existing_namespace_is_used_without_rendering_it():
    objects = render({"namespace": {"create": False, "name": "ml-platform"}})
    assert not by_kind(objects, "Namespace")
    assert one(objects, "Deployment")["metadata"]["namespace"] == "ml-platform"
    assert one(render(), "Deployment")["metadata"]["namespace"] == "kubeflow"  # the release namespace


def test_two_replicas_elect_a_leader_with_lease_rbac_and_a_pdb():
    objects = render({"replicas": 2})
    assert "--leader-elect" in args(objects)
    role = one(objects, "Role", "training-pytorch-operator-leader-election")
    assert role["metadata"]["namespace"] == "kubeflow"
    assert {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]} == \
        {("coordination.k8s.io", "leases")}
    assert one(objects, "RoleBinding", "training-pytorch-operator-leader-election")["roleRef"]["name"] == role["metadata"]["name"]
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= \
        one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"].items()


def test_watched_namespace():
    objects = render({"watchNamespace": "team-a"})
    assert "--namespace=team-a" in args(objects)
    hook = one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}


@pytest.mark.parametrize("scheduler, group", [("volcano", "scheduling.volcano.sh"),
                                              ("scheduler-plugins", "scheduling.x-k8s.io")])
def test_gang_scheduling_adds_flag_and_podgroup_rules_only_then(scheduler, group):
    objects = render({"gangScheduling": {"enabled": True, "scheduler": scheduler}})
    assert f"--gang-scheduler-name={scheduler}" in args(objects)
    assert expand(group, ["podgroups"], ALL) <= rules(objects)
    assert not any(r == "podgroups" for _, r, _ in rules(render()))


def test_crds_install_and_keep():
    crd = one(render(), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not by_kind(render({"crds": {"install": False}}), "CustomResourceDefinition")
    unkept = one(render({"crds": {"keep": False}}), "CustomResourceDefinition")
    assert "helm.sh/resource-policy" not in (unkept["metadata"].get("annotations") or {})


def test_more_schemes_get_their_webhooks_and_rbac():
    objects = render({"enableSchemes": ["pytorchjob", "tfjob"]})
    assert "--enable-scheme=tfjob" in args(objects)
    paths_ = [h["clientConfig"]["service"]["path"] for h in one(objects, "ValidatingWebhookConfiguration")["webhooks"]]
    assert paths_ == ["/validate-kubeflow-org-v1-pytorchjob", "/validate-kubeflow-org-v1-tfjob"]
    assert expand("kubeflow.org", ["tfjobs"], ALL) <= rules(objects)


def test_rbac_and_service_account_switches():
    objects = render({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "platform-sa"}})
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ServiceAccount")
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "platform-sa"


def test_aggregated_roles_extend_view_and_edit():
    objects = render()
    view = one(objects, "ClusterRole", "training-pytorch-operator-pytorchjobs-view")
    edit = one(objects, "ClusterRole", "training-pytorch-operator-pytorchjobs-edit")
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert "aggregate-to-view" not in json.dumps(edit["metadata"]["labels"])
    assert not by_kind(render({"rbac": {"aggregateToDefaultRoles": False}}), "ClusterRole")[1:]


def test_pod_settings_flags_and_metrics():
    objects = render({"image": {"digest": "sha256:" + "b" * 64}, "logLevel": "debug", "kubeApiQPS": 50,
                      "extraArgs": ["--enable-scheme=jaxjob"], "pytorchInitContainerImage": "mirror.local/alpine:3.10",
                      "nodeSelector": {"role": "system"}, "priorityClassName": "system-cluster-critical",
                      "podLabels": {"team": "ml"}, "imagePullSecrets": ["regcred"],
                      "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    c = operator_container(objects)
    pod = one(objects, "Deployment")["spec"]["template"]
    assert c["image"].endswith("@sha256:" + "b" * 64)
    assert {"--zap-log-level=debug", "--kube-api-qps=50", "--enable-scheme=jaxjob",
            "--pytorch-init-container-image=mirror.local/alpine:3.10"} <= set(c["args"])
    assert pod["spec"]["nodeSelector"] == {"role": "system"}
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["metadata"]["labels"]["team"] == "ml" and pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    metrics = one(objects, "Service", "training-pytorch-operator-metrics")
    assert metrics["spec"]["ports"][0]["port"] == 8080
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()
    assert next(p for p in c["ports"] if p["name"] == "metrics")["containerPort"] == 8080


def test_helm_test_hook_checks_the_metrics_endpoint():
    test_pod = one(render(), "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert "training-pytorch-operator-metrics.kubeflow.svc:8080/metrics" in test_pod["spec"]["containers"][0]["args"][0]


def test_notes_list_the_verification_steps():
    import helm_python
    with helm_python.Chart.load(str(CHART)) as chart:
        notes = chart.render({}, name="training", namespace="kubeflow")["pytorch-operator/templates/NOTES.txt"]
    assert "kubectl get crd pytorchjobs.kubeflow.org" in notes
    assert "rollout status deployment/training-pytorch-operator" in notes
    assert "helm install mnist charts/pytorchjob" in notes


@pytest.mark.parametrize("values, path", [
    ({"replicas": 0}, "replicas"),
    ({"gangScheduling": {"scheduler": "kube-batch"}}, "gangScheduling.scheduler"),
    ({"enableSchemes": ["pytorch"]}, "enableSchemes.0"),
    ({"webhook": {"failurePolicy": "Maybe"}}, "webhook.failurePolicy"),
    ({"namespace": {"name": "Bad_NS"}}, "namespace.name"),
    ({"logLevel": "verbose"}, "logLevel"),
    ({"resources": {"limits": {"memory": "lots"}}}, "resources.limits.memory"),
    ({"extraArgs": ["leader-elect"]}, "extraArgs.0"),
    ({"imag": {}}, "imag"),
])
def test_invalid_values_are_refused_naming_the_field(values, path):
    with pytest.raises(UserError) as err:
        render(values)
    assert any(f.path == path or f.path.startswith(path + ".") for f in err.value.findings), str(err.value)


def test_values_documented_and_readme_table_current():
    _, undocumented = chartdoc.parameters(CHART / "values.yaml")
    assert undocumented == []
    assert (CHART / "README.md").read_text() == chartdoc.updated_readme(CHART), \
        "charts/pytorch-operator/README.md's parameter table is stale: run `make docs`"


@pytest.mark.parametrize("chart", [paths.JOB_CHART, paths.OPERATOR_CHART], ids=lambda p: p.name)
def test_helm_lint_strict_is_clean(chart):
    from tests.support.lint import helm_lint
    assert helm_lint(chart) == []


def test_the_readmes_private_registry_overrides_are_the_tested_scenario():
    from tests.support import scenarios

    readme = (paths.OPERATOR_CHART / "README.md").read_text()
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block == (scenarios.DIR / "pytorch-operator" / "private-registry.yaml").read_text()
