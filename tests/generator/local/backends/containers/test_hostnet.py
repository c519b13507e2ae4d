"""`run --container` puts back what root's podman changed on the machine for it (its CNI plugins
turn on net.ipv4.ip_forward and make the CNI-FORWARD and CNI-ADMIN chains), and only that: what
was so before stays, and so does all of it while another container's or an administrator's rule
is in those chains. The runs going at once share one record, and the last to end undoes."""
from __future__ import annotations

import shlex

import pytest

from generator.local.backends.containers import hostnet
from generator.local.backends.containers.hostnet import Host

JUMP = '-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD'
ADMIN_JUMP = '-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN'
DOCKER = "-A FORWARD -j DOCKER-USER"
CONTAINER = ["-A CNI-FORWARD -d 10.88.0.3/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
             "-A CNI-FORWARD -s 10.88.0.3/32 -j ACCEPT"]  # another user's container, started during the run
CLEAN = Host("0", {"FORWARD": [DOCKER]})
# What podman leaves once the run's containers and network are gone.
AFTER = Host("1", {"FORWARD": [JUMP, DOCKER], "CNI-FORWARD": [ADMIN_JUMP], "CNI-ADMIN": []})


def apply(host: Host, todo: hostnet.Undo) -> Host:
    """`todo` carried out on a model of iptables and /proc, as the kernel would."""
    rules = {chain: list(lines) for chain, lines in host.rules.items()}
    for args in todo.commands:
        verb, chain, rest = args[0], args[1], args[2:]
        if verb == "-D":
            rules[chain].remove(f"-A {chain} {shlex.join(rest)}".replace("'", '"'))
        elif verb == "-F":
            rules[chain] = []
        elif verb == "-X":
            assert rules.pop(chain) == [], f"{chain} deleted while it holds rules"
            assert not any(line.endswith(f"-j {chain}") for lines in rules.values() for line in lines), \
                f"{chain} deleted while a rule jumps to it"
    return Host(todo.ip_forward or host.ip_forward, rules)


def test_what_the_run_made_goes_and_the_machine_is_as_before():
    todo = hostnet.undo(CLEAN, AFTER)
    assert todo.ip_forward == "0" and todo.kept == []
    assert apply(AFTER, todo) == CLEAN


def test_ip_forward_already_on_and_chains_already_there_are_left_alone():
    before = Host("1", AFTER.rules)
    assert hostnet.undo(before, AFTER) == hostnet.Undo(None, [], [])
    # Chains there before, but ip_forward off: only ip_forward goes back.
    before = Host("0", {**AFTER.rules, "CNI-FORWARD": [ADMIN_JUMP, *CONTAINER]})
    now = Host("1", before.rules)
    assert hostnet.undo(before, now) == hostnet.Undo("0", [], [])


@pytest.mark.parametrize("chain, rules", [("CNI-FORWARD", [ADMIN_JUMP, *CONTAINER]),
                                          ("CNI-ADMIN", ["-A CNI-ADMIN -s 10.0.0.0/8 -j DROP"])])
def test_another_users_rules_in_the_chains_keep_all_of_it_and_say_so(chain, rules):
    now = Host("1", {**AFTER.rules, chain: rules})
    todo = hostnet.undo(CLEAN, now)
    assert (todo.ip_forward, todo.commands) == (None, [])
    (said,) = todo.kept
    assert said.startswith("CNI-FORWARD, CNI-ADMIN, net.ipv4.ip_forward=1 (") and f"{len(rules) - (chain == 'CNI-FORWARD')} rules" in said


def test_only_the_admin_chain_made_goes_with_the_jump_into_it():
    before = Host("1", {"FORWARD": [JUMP], "CNI-FORWARD": []})
    now = Host("1", {"FORWARD": [JUMP], "CNI-FORWARD": [ADMIN_JUMP], "CNI-ADMIN": []})
    assert apply(now, hostnet.undo(before, now)) == before


def test_without_iptables_ip_forward_still_goes_back():
    assert hostnet.undo(Host("0"), Host("1")) == hostnet.Undo("0", [], [])
    # iptables missing when the first run started: which chains were there before is unknown.
    assert hostnet.undo(Host("0"), AFTER) == hostnet.Undo("0", [], [])


def test_the_last_of_the_runs_going_at_once_undoes_from_the_first_ones_record(tmp_path, monkeypatch):
    record = tmp_path / "run" / "container-runs.json"
    machine = {"now": CLEAN}
    applied = []
    monkeypatch.setattr(hostnet, "read", lambda: machine["now"])
    monkeypatch.setattr(hostnet, "put_back", lambda todo: applied.append(todo) or ["done"])
    running = {"a", "b"}
    alive = running.__contains__
    hostnet.hold("a", alive, record)
    machine["now"] = AFTER  # a's containers started: b starts on a machine podman already changed
    hostnet.hold("b", alive, record)
    said = []
    hostnet.release("a", alive, record, say=said.append)
    assert applied == [] and record.exists()
    hostnet.release("b", alive, record, say=said.append)
    assert applied == [hostnet.undo(CLEAN, AFTER)] and not record.exists()  # CLEAN: the first run's record
    assert said == ["put back what podman changed for the run: done"]
    hostnet.release("b", alive, record, say=said.append)  # the watcher, after the run let go: nothing more
    assert len(applied) == 1


def test_a_run_killed_before_it_let_go_holds_the_record_no_more(tmp_path, monkeypatch):
    record = tmp_path / "container-runs.json"
    monkeypatch.setattr(hostnet, "read", lambda: AFTER if record.exists() else CLEAN)
    applied = []
    monkeypatch.setattr(hostnet, "put_back", lambda todo: applied.append(todo) or [])
    hostnet.hold("killed", lambda owner: True, record)
    # Its watcher was killed too; the next run keeps the machine as it was before the killed one.
    hostnet.hold("next", lambda owner: owner == "next", record)
    hostnet.release("next", lambda owner: owner == "next", record, say=lambda line: None)
    assert applied == [hostnet.undo(CLEAN, AFTER)]
