"""A PyTorchJob planned for this machine (kinds/pytorchjob/plan.py): each replica's command, its
processes per pod under torchrun, its folders, and the elastic rendezvous."""
import sys

from generator.kinds.pytorchjob import plan as v1_plan
from tests.support import local_jobs


def test_plan_maps_commands_nproc_and_elastic(tmp_path):
    body, _ = local_jobs.job("plan", "pass", "pass", workers=1)
    body["spec"]["nprocPerNode"] = "2"
    for spec in body["spec"]["pytorchReplicaSpecs"].values():
        c = spec["template"]["spec"]["containers"][0]
        c["command"], c["args"] = ["torchrun", "--module", "trainer"], ["--output-dir=/data/out"]
        c["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "data", "mountPath": "/data"}]
        spec["template"]["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                                               {"name": "data", "emptyDir": {}}]
    plan = v1_plan.plan(body, tmp_path)
    master, worker = plan.replicas
    assert master.argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert master.argv[-1] == f"--output-dir={tmp_path}/pods/master-0/data/out"
    assert worker.env["WORLD_SIZE"] == "4" and worker.env["PET_NPROC_PER_NODE"] == "2"
    assert "/dev/shm" not in master.mounts
    body["spec"]["pytorchReplicaSpecs"].pop("Master")
    body["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d", "maxRestarts": 4}
    (only,) = v1_plan.plan(body, tmp_path).replicas
    assert only.env["PET_NNODES"] == "1:3" and only.env["PET_RDZV_BACKEND"] == "c10d"
    assert only.env["PET_RDZV_ENDPOINT"].startswith("127.0.0.1:") and only.env["PET_MAX_RESTARTS"] == "4"
    assert "MASTER_ADDR" not in only.env
