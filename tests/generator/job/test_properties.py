"""Property-based: any valid description gives values that validate and render into jobs the
operator admits; any single bad value in a valid file is rejected by its path."""
import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from generator import helm, kinds, paths
from generator.job import describe, validation
from tests.support import kube

SETTINGS = settings(max_examples=40)  # the rest from the profile in tests/conftest.py

names = st.from_regex(r"[a-z][a-z0-9]{0,20}(-[a-z0-9]{1,10})?", fullmatch=True)
memory_mi = st.integers(min_value=64, max_value=65536)
env_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True)


@st.composite
def descriptions(draw):
    workers = draw(st.integers(0, 6))
    gpus = draw(st.integers(0, 4))
    nproc_choices = [None, "1", "auto", "cpu"] + ([str(n) for n in range(2, gpus + 1)] if gpus else ["2", "4"])
    memory = draw(memory_mi)
    limit = memory + draw(st.integers(0, 4096))
    backend = draw(st.sampled_from(["auto", "gloo"] + (["nccl"] if gpus else [])))
    elastic = None
    if workers and draw(st.booleans()):
        low = draw(st.integers(1, workers))
        elastic = f"{low}:{draw(st.integers(workers, workers + 4))}"
    return describe.Description(
        name=draw(names), workers=workers, gpus=gpus, nproc_per_node=draw(st.sampled_from(nproc_choices)),
        cpu=draw(st.sampled_from(["100m", "500m", "1", "2.5", "8"])), memory=f"{memory}Mi", memory_limit=f"{limit}Mi",
        backend=backend, elastic=elastic,
        restart_policy=draw(st.sampled_from([None, "Always", "OnFailure", "Never", "ExitCode"])),
        backoff_limit=draw(st.none() | st.integers(0, 10)), ttl=draw(st.none() | st.integers(0, 86400)),
        deadline=draw(st.none() | st.integers(1, 86400)),
        output_size=draw(st.sampled_from([None, "1Gi", "500Mi"])),
        shm_size=draw(st.sampled_from([None, "64Mi", "2Gi"])),
        tolerations=tuple(draw(st.lists(st.sampled_from(["spot:NoSchedule", "gpu=a100:NoExecute", "dedicated"]),
                                        max_size=2, unique=True))),
        node_selectors=tuple(draw(st.lists(st.sampled_from(["pool=a", "zone=eu-1b"]), max_size=2, unique=True))),
        env=tuple(f"{n}=v" for n in draw(st.lists(env_names, max_size=3, unique=True))),
        queue=draw(st.sampled_from([None, "team-a"])), args=tuple(draw(st.lists(st.sampled_from(["--epochs=2", "--amp"]),
                                                                                max_size=2))))


@SETTINGS
@given(descriptions())
def test_valid_descriptions_validate_render_and_are_admitted(description):
    values = describe.build(description, kinds.for_values)
    assert validation.check_values(values, kinds.for_values(values)).findings == []
    objects = helm.render_objects(paths.JOB_CHART, values, "prop", "default")
    jobs = [o for o in objects if o["kind"] == "PyTorchJob"]
    assert len(jobs) == 1
    for obj in objects:
        assert kube.problems(obj) == []
    specs = jobs[0]["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1
    assert specs.get("Worker", {}).get("replicas", 0) == description.workers


MUTATIONS = [
    ("topology.workers", -1), ("topology.backend", "mpi"), ("topology.nprocPerNode", "many"),
    ("resources.requests.cpu", "1.5 cores"), ("resources.requests.memory", "-1Gi"), ("resources.limits.memory", "1GB"),
    ("resources.gpus", -1), ("restartPolicy", "Sometimes"), ("port", 0), ("port", 65536),
    ("image.pullPolicy", "Sometimes"), ("image.digest", "sha256:abc"), ("job.name", "UPPER"),
    ("job.name", "x" * 70), ("shm.sizeLimit", "huge"), ("runPolicy.backoffLimit", -3),
    ("runPolicy.cleanPodPolicy", "Everything"), ("runPolicy.ttlSecondsAfterFinished", "soon"),
    ("elasticPolicy.rdzvBackend", "zookeeper"), ("output.mountOn", "workers"), ("kueue.queueName", "Team A"),
    ("topology.extra", 1), ("master.restartPolicy", "Maybe"), ("worker.resources.gpus", -5),
    ("output.size", "lots"), ("env", [{"value": "no-name"}]),
]


def _apply(values, path, bad):
    node = values
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = bad


@SETTINGS
@given(descriptions(), st.sampled_from(MUTATIONS))
def test_a_single_bad_value_is_rejected_by_its_path(description, mutation):
    path, bad = mutation
    values = copy.deepcopy(describe.build(description, kinds.for_values))
    _apply(values, path, bad)
    findings = validation.check_values(values, kinds.for_values(values)).findings
    assert findings, f"{path}={bad!r} was accepted"
    assert any(f.path.startswith(path) for f in findings), [f.render() for f in findings]
