"""diagnose on recorded API objects: pods the scheduler cannot place, and their claims."""
from __future__ import annotations

from generator.diagnose import report, rules
from tests.generator.diagnose.rules.shots import event, job, only, pod, shot, unschedulable


def test_insufficient_gpus_names_every_pending_pod_once_and_the_gpus_value():
    message = ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: "
               "1 No preemption victims found for incoming pod.")
    pending = [pod(n, r, "Pending", statuses=[], conditions=unschedulable(message),
                   spec={"containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]})
               for n, r in (("mnist-master-0", "Master"), ("mnist-worker-0", "Worker"), ("mnist-worker-1", "Worker"))]
    # The operator repeats each pod's condition as a Warning on the job; it is the same cause.
    echoes = [event("PyTorchJob", "mnist", "Unschedulable", f"Error pod {p['metadata']['name']} condition message: {message}")
              for p in pending]
    findings = rules.diagnose(shot(job=job(gpus=2), pods=pending, events=echoes))
    assert len(findings) == 1
    top = findings[0]
    assert (top.severity, top.reason) == ("error", "Insufficient nvidia.com/gpu")
    assert top.object == "Pod/mnist-master-0 (and 2 more: mnist-worker-0, mnist-worker-1)"
    assert "lower `resources.gpus` (each pod asks for 2; the nodes offer 1 in all)" in top.fix
    assert report.exit_code(findings) == report.FOUND

def test_untolerated_taints_get_a_toleration_written_from_the_nodes_taint():
    message = "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: gpu}. preemption: not eligible"
    nodes = [{"metadata": {"name": "gpu-1", "labels": {}}, "spec": {"taints": [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}, "status": {"allocatable": {}}}]
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message))]
    found = only(rules.diagnose(shot(pods=pending, nodes=nodes)), "UntoleratedTaint")
    assert "`tolerations`" in found.fix and "{dedicated: gpu}" in found.fix
    assert "{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}" in found.fix

def test_a_selector_no_node_matches():
    message = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message),
                   spec={"nodeSelector": {"pool": "a100"}})]
    found = only(rules.diagnose(shot(pods=pending)), "NodeSelectorMismatch")
    assert "`nodeSelector` {'pool': 'a100'}" in found.fix

def test_a_claim_that_does_not_exist():
    message = 'persistentvolumeclaim "shared-data" not found'
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message),
                   spec={"volumes": [{"name": "output", "persistentVolumeClaim": {"claimName": "shared-data"}}]})]
    findings = rules.diagnose(shot(pods=pending, claims={"shared-data": None}))
    assert {f.reason for f in findings} == {"ClaimNotFound"}
    assert any(f.object == "PersistentVolumeClaim/shared-data" and "`output.existingClaim`" in f.fix for f in findings)

def test_a_read_write_once_claim_on_pods_of_several_nodes():
    pods = [pod(n, r, spec={"nodeName": node, "volumes": [{"name": "o", "persistentVolumeClaim": {"claimName": "out"}}]})
            for n, r, node in (("mnist-master-0", "Master", "a"), ("mnist-worker-0", "Worker", "b"))]
    claim = {"spec": {"accessModes": ["ReadWriteOnce"]}, "status": {"phase": "Bound"}}
    found = only(rules.diagnose(shot(pods=pods, claims={"out": claim})), "ReadWriteOnceOnManyNodes")
    assert "pods on 2 nodes" in found.message and "`output.mountOn: master`" in found.fix

def test_an_unbound_claim_names_its_storage_class():
    message = "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: not eligible"
    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message),
                   spec={"volumes": [{"name": "output", "persistentVolumeClaim": {"claimName": "mnist-output"}}]})]
    claim = {"spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast-ssd"}, "status": {"phase": "Pending"}}
    said = event("PersistentVolumeClaim", "mnist-output", "ProvisioningFailed",
                 'storageclass.storage.k8s.io "fast-ssd" not found')
    findings = rules.diagnose(shot(pods=pending, claims={"mnist-output": claim}, events=[said]))
    assert [f.reason for f in findings] == ["ClaimUnbound", "ProvisioningFailed"]
    assert findings[1].message == 'claim mnist-output is Pending: storageclass.storage.k8s.io "fast-ssd" not found'
    assert "set `output.storageClassName` (now fast-ssd)" in findings[1].fix
