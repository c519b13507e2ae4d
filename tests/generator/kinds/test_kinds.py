"""The one seam per job kind: the lookup decides the kind, and nothing outside generator/kinds
tests which kind it holds, branches on a kind's target or policy, or lets a kind go unsaid."""
import ast
import re

import pytest

from generator import kinds
from generator.errors import UserError
from tests.support import ROOT

# What a kind test looks like: the old `_v2(shot)` helper, `is_trainjob`, a comparison with the
# kind's name, with a chart target ("v1", "v2") or a kind's `.target`, or with a local plan's
# policy constant (the runner asks the plan's policy object instead).
KIND_TEST = "|".join([
    r'_v2\b|_v2\(|is_trainjob|"TrainJob" ==|== "TrainJob"|"PyTorchJob" ==|== "PyTorchJob"',
    r"""target\W{0,4}\s*[!=]=\s*["']v\d|["']v\d["']\s*[!=]=""",  # target == "v2", values["target"] != "v1"
    r"\.target\s*[!=]=|[!=]=\s*[\w.]*\.target\b",  # kind.target == ...
    r"[!=]=\s*(\w+\.)?(JOBSET|OPERATOR)\b|\b(JOBSET|OPERATOR)\s*[!=]=",  # plan.policy == JOBSET
])
KIND_NAMES = {k.kind for k in kinds.ALL}
TARGETS = {k.target for k in kinds.ALL}


def kind_by_omission(tree: ast.AST) -> list[int]:
    """Lines where a parameter or a dataclass field defaults to a kind (kinds.DEFAULT, kinds.TRAINJOB,
    kinds.DEFAULT.kind, a kind's name, or a target for one named so): a caller that forgets it gets one."""
    def is_kind(name: str, node: ast.AST | None) -> bool:
        while isinstance(node, ast.Attribute):
            node = node.value
            if isinstance(node, ast.Name) and node.id == "kinds":
                return True
        return isinstance(node, ast.Constant) and (node.value in KIND_NAMES or "target" in name and node.value in TARGETS)

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = [*args.posonlyargs, *args.args][-len(args.defaults):] if args.defaults else []
            pairs = [*zip(positional, args.defaults, strict=True), *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
            lines += [d.lineno for a, d in pairs if is_kind(a.arg, d)]
        elif isinstance(node, ast.ClassDef):
            lines += [n.lineno for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                      and is_kind(n.target.id, n.value)]
    return lines


def outside_kinds(root=ROOT) -> list[str]:
    """Each kind test or kind by omission in generator/ outside generator/kinds/, as file:line: text."""
    found = []
    for path in sorted((root / "generator").rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where.startswith("generator/kinds/"):
            continue
        text = path.read_text()
        lines = text.splitlines()
        found += [f"{where}:{i}: {line.strip()}" for i, line in enumerate(lines, 1) if re.search(KIND_TEST, line)]
        found += [f"{where}:{i}: {lines[i - 1].strip()} (a kind by omission)" for i in kind_by_omission(ast.parse(text))]
    return found


def test_no_module_outside_kinds_tests_which_kind_it_holds():
    outside = outside_kinds()
    assert outside == [], "decide the kind through generator.kinds, and pass it where it matters:\n" + "\n".join(outside)


@pytest.mark.parametrize("line", [
    'if obj.get("kind") == "TrainJob":', "    if _v2(shot):", 'if merged.get("target") == "v2":',
    'if values["target"] != "v1":', 'if "v2" == target:', "if kind.target == 'v2':", "if self.plan.policy == JOBSET:",
    "if plan.policy != local_plan.OPERATOR:"])
def test_the_pattern_finds_a_kind_test_so_the_check_above_can_fail(line):
    assert re.search(KIND_TEST, line)


def test_a_kind_left_to_a_default_is_found_so_the_check_above_can_fail():
    planted = ("def get_job(cluster, name, kind=kinds.DEFAULT): ...\n"
               "def wait(c, *, kind: JobKind = kinds.TRAINJOB): ...\n"
               "class Submitted:\n    kind: str = kinds.DEFAULT.kind\n"
               "class Plan:\n    kind: str = 'PyTorchJob'\n"
               "def render(values, target='v2'): ...\n"
               "def fine(c, name, kind, seconds=120, target=None, api_version='v1'): ...\n")
    assert kind_by_omission(ast.parse(planted)) == [1, 2, 4, 6, 7]


def test_a_file_is_the_kind_of_the_job_it_holds():
    trainjob = {"kind": "TrainJob", "metadata": {"name": "a"}}
    runtime = {"kind": "TrainingRuntime", "metadata": {"name": "a"}}
    pytorchjob = {"kind": "PyTorchJob", "metadata": {"name": "b"}}
    assert kinds.in_manifest([runtime, trainjob]) is kinds.TRAINJOB
    assert kinds.in_manifest([pytorchjob, {"kind": "PersistentVolumeClaim"}]) is kinds.PYTORCHJOB
    assert kinds.in_manifest([{"job": {"name": "values"}}]) is None  # values, not a manifest
    assert kinds.for_objects([{"kind": "PersistentVolumeClaim"}]) is kinds.DEFAULT
    assert kinds.for_object(trainjob) is kinds.TRAINJOB and kinds.for_object({}) is kinds.PYTORCHJOB
    assert kinds.TRAINJOB.job_of([runtime, trainjob]) is trainjob


def test_values_are_the_kind_their_target_renders_and_the_charts_default_without_one():
    assert kinds.for_values({"target": "v2", "job": {"name": "a"}}) is kinds.TRAINJOB
    assert kinds.for_values({"target": "v1"}) is kinds.PYTORCHJOB
    assert kinds.for_values({}) is kinds.DEFAULT is kinds.PYTORCHJOB  # the chart's target: v1
    assert kinds.for_values({"target": None}) is kinds.DEFAULT  # null removes the value, as Helm does


def test_a_kind_by_name_and_an_unknown_name_refused_with_the_known_ones():
    assert kinds.get("TrainJob") is kinds.TRAINJOB
    with pytest.raises(UserError, match="MPIJob.*PyTorchJob, TrainJob"):
        kinds.get("MPIJob")


def test_each_kind_names_its_own_pods_and_no_other_kinds():
    operator = {"training.kubeflow.org/replica-type": "Worker", "training.kubeflow.org/replica-index": "1"}
    jobset = {"jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0",
              "batch.kubernetes.io/job-completion-index": "2"}
    assert kinds.PYTORCHJOB.replica_name(operator) == "worker-1" and kinds.TRAINJOB.replica_name(operator) is None
    assert kinds.TRAINJOB.replica_name(jobset) == "node-0-2" and kinds.PYTORCHJOB.replica_name(jobset) is None


def test_a_trainjob_without_a_running_condition_runs_once_a_child_job_is_active():
    idle = {"kind": "TrainJob", "status": {"jobsStatus": [{"name": "node", "active": 0}]}}
    busy = {"kind": "TrainJob", "status": {"jobsStatus": [{"name": "node", "active": 2}]}}
    assert kinds.TRAINJOB.condition(idle) == ("Created", {})
    assert kinds.TRAINJOB.condition(busy) == ("Running", {})
    # Its Job ended but JobSet's condition has not reached the TrainJob yet: still Running, not back to Created.
    ended = {"kind": "TrainJob", "status": {"jobsStatus": [{"name": "node", "active": 0, "succeeded": 1}]}}
    assert kinds.TRAINJOB.condition(ended) == ("Running", {})
    assert kinds.PYTORCHJOB.condition({"kind": "PyTorchJob", "status": busy["status"]}) == ("Created", {})
    done = {"type": "Complete", "status": "True"}
    assert kinds.TRAINJOB.condition({**busy, "status": {**busy["status"], "conditions": [done]}}) == ("Complete", done)


def test_suspension_is_read_and_resumed_where_each_kind_keeps_it():
    assert kinds.PYTORCHJOB.suspended({"spec": {"runPolicy": {"suspend": True}}})
    assert not kinds.PYTORCHJOB.suspended({"spec": {"suspend": True}})
    assert kinds.TRAINJOB.suspended({"spec": {"suspend": True}})
    assert kinds.PYTORCHJOB.suspend_patch() == '{"spec":{"runPolicy":{"suspend":false}}}'
    assert kinds.TRAINJOB.suspend_patch() == '{"spec":{"suspend":false}}'


def test_only_a_trainjobs_own_runtime_goes_with_it():
    own = {"metadata": {"name": "a"}, "spec": {"runtimeRef": {"kind": "TrainingRuntime", "name": "a"}}}
    shared = {"metadata": {"name": "a"}, "spec": {"runtimeRef": {"name": "torch-distributed"}}}
    assert kinds.TRAINJOB.own_companions(own) == [("trainingruntimes", "a")]
    assert kinds.TRAINJOB.own_companions(shared) == []
    assert kinds.TRAINJOB.runtime_ref(shared) == ("clustertrainingruntimes", "torch-distributed", False)
    assert kinds.PYTORCHJOB.runtime_ref(own) is None


def _crds() -> dict[str, dict]:
    """The CRDs a cluster gets for each kind: the operator chart's, and Trainer v2.3's (../shared/reference)."""
    from tests.support import kube

    out = {"PyTorchJob": kube.crd()}
    trainjob = kube.trainer_crd("TrainJob")
    if trainjob is None:
        pytest.skip("needs ../shared/reference/trainer-v2.3.0 beside the clone")
    out["TrainJob"] = trainjob
    return out


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.kind)
def test_each_kinds_api_coordinates_are_those_of_its_crd(kind):
    """Every caller (the releases' webhook probes, the client, Kueue's integrations) takes group,
    version and plural from the kind; they are right only while they are its CRD's."""
    crd = _crds()[kind.kind]
    served = [v["name"] for v in crd["spec"]["versions"] if v.get("served") and v.get("storage")]
    assert (crd["spec"]["group"], served, crd["spec"]["names"]["plural"], crd["spec"]["names"]["kind"]) == (
        kind.group, [kind.version], kind.plural, kind.kind)
    assert kind.kueue_integration == f"{kind.group}/{kind.kind.lower()}"  # Kueue's name for the integration
