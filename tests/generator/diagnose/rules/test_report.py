"""diagnose on recorded API objects: the ranking and the JSON of all findings together."""
from __future__ import annotations

import json

from generator.diagnose import report, rules
from tests.generator.diagnose.rules.shots import job, pod, shot, unschedulable


def test_a_running_job_has_nothing_wrong_and_exits_0():
    findings = rules.diagnose(shot(job=job(conditions=("Created", "Running"))))
    assert findings == [] and report.exit_code(findings) == report.HEALTHY

def test_json_is_a_stable_list_of_findings():

    pending = [pod("mnist-master-0", "Master", "Pending", statuses=[],
                   conditions=unschedulable("0/1 nodes are available: 1 Insufficient memory."))]
    data = json.loads(report.as_json(rules.diagnose(shot(pods=pending))))
    assert [sorted(d) for d in data] == [["fix", "message", "object", "reason", "severity"]]
    assert data[0]["reason"] == "Insufficient memory" and "`resources.requests.memory` (each pod asks for 4Gi" in data[0]["fix"]
