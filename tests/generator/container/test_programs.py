"""Which images run on this machine under `generator run`, and how the rest are refused."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from generator.container import programs
from tests.support import scenarios


@pytest.mark.parametrize(("image", "repository"), [
    ("alpine:3.10", "alpine"),
    ("docker.io/library/alpine:3.10", "alpine"),
    ("busybox", "busybox"),
    ("ghcr.io/pytorchjob-kit/trainer:0.1.0", "ghcr.io/pytorchjob-kit/trainer"),
    ("ghcr.io/pytorchjob-kit/trainer@sha256:" + "a" * 64, "ghcr.io/pytorchjob-kit/trainer"),
    ("localhost:5000/team/trainer:v2", "localhost:5000/team/trainer"),
    ("localhost:5000/team/trainer", "localhost:5000/team/trainer"),
])
def test_repository_drops_tag_digest_and_docker_hubs_prefixes(image, repository):
    assert programs.repository(image) == repository


# What runs each image a chart renders: the job chart's pods and TrainJobs are the trainer, the
# operator chart's Deployment the operator, its `helm test` Pod the test image, and the init
# container image it passes the operator (which puts it into Worker pods) a shell. The charts' own
# images run as they are; a mirror named in the values is refused with the `--image` mapping
# that runs it, and runs with that mapping.
ROLE = {"PyTorchJob": "trainer", "TrainJob": "trainer", "TrainingRuntime": "trainer", "Deployment": "operator",
        "Pod": "test"}
INIT_FLAG = "--pytorch-init-container-image="


def rendered_images(chart: str, name: str) -> list[tuple[str, str, str]]:
    """(object, image, the role that runs it) for every image the scenario renders."""
    found = []

    def walk(node, obj: str, role: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    assert role, f"{obj} renders image {value}, and no role here says what runs it"
                    found.append((obj, value, role))
                walk(value, obj, role)
        elif isinstance(node, list):
            for item in node:
                if isinstance(item, str) and item.startswith(INIT_FLAG):
                    found.append((obj, item.removeprefix(INIT_FLAG), "init"))
                walk(item, obj, role)

    for o in scenarios.render_objects(chart, name):
        walk(o, f"{o['kind']}/{o['metadata']['name']}", ROLE.get(o["kind"], ""))
    return found


# `generator run` runs the job chart's pods; the operator chart's controllers run only on the cluster.
@pytest.mark.parametrize(("chart", "name"), [case for case in scenarios.all_cases() if case[0] == "pytorchjob"])
def test_every_image_the_job_chart_renders_runs_here_or_is_refused_with_the_mapping_that_runs_it(chart, name):
    images = rendered_images(chart, name)
    assert images, "the scenario renders no image"
    named = yaml.safe_dump(scenarios.values(chart, name))  # a mirror is named in the values; the rest are the charts' own
    for obj, image, role in images:
        known = next(p for p in programs.known().values() if p.role == role)
        repository = programs.repository(image)
        try:
            program = programs.resolve(image)
        except programs.ImagePullError as refused:
            message = str(refused)
            assert repository in named, f"{obj}: the chart's own image {image} is refused: {message}"
            assert message.startswith(f'image "{image}" cannot run on this machine'), (obj, message)
            assert f"`--image {repository}=<one of them>`" in message and known.repository in message, (obj, message)
            program = programs.resolve(image, {repository: known.repository})  # the mapping the hint offers
        assert program.role == role, f"{obj}: {image} runs as the {program.role} image, not the {role}"
        if role == "trainer":  # what `generator run` and the node start for it
            assert program.entrypoint == ("python", "-m", "trainer") and program.mode == programs.HOST
        else:
            assert shutil.which(program.entrypoint[0]), f"{obj}: {image} runs {program.entrypoint[0]}, absent here"


def test_an_unknown_image_is_refused_naming_what_runs_and_the_way_out():
    with pytest.raises(programs.ImagePullError) as refused:
        programs.resolve("example.com/team/app:1.0")
    message = str(refused.value)
    assert message.startswith('image "example.com/team/app:1.0" cannot run on this machine')
    assert "ghcr.io/pytorchjob-kit/trainer (python -m trainer from" in message
    # Both ways to say it is your own code, then the way to say it is a copy of a known image.
    assert ("For your own code pass `--image example.com/team/app=host` (its command runs with this machine's python) "
            "or `--image example.com/team/app=DIR[:PATH]` (the folder DIR is what the image holds at PATH, default its "
            "workingDir, else /workspace) to "
            "`cluster up` or `run`; pass `--image example.com/team/app=<one of them>` if it is a copy of one") in message


def test_an_alias_runs_a_copy_as_the_image_it_copies():
    program = programs.resolve("registry.example.com/ml/trainer:7", {"registry.example.com/ml/trainer": programs.of("trainer").repository})
    assert program.role == "trainer"


KNOWN = [p.repository for p in programs.known().values()]


def test_your_own_image_runs_with_this_interpreter_and_none_of_the_trainers_env(tmp_path):
    repo, target = programs.mapping("registry.example.com/ml/bert=host", KNOWN)
    program = programs.resolve("registry.example.com/ml/bert:1.4", {repo: target})
    assert (program.role, program.mode, program.entrypoint, program.code) == ("user", programs.HOST, (), None)
    # python, torchrun, bash and sh found on PATH are this interpreter's folder first, then this machine's
    assert program.env()["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert "PYTHONPATH" not in program.env()  # this checkout is the trainer's, not your code's


def test_a_folder_is_what_the_image_holds_at_path_else_at_its_working_dir_else_workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "proj").mkdir()
    assert programs.mapping("toy=proj", KNOWN) == ("toy", str(tmp_path / "proj"))  # made absolute: the node runs elsewhere
    assert programs.mapping("toy=proj:/opt/app/", KNOWN) == ("toy", f"{tmp_path / 'proj'}:/opt/app")
    # A tag is the node's to pull; under `run` this machine's programs stand for every tag of the repository.
    tagged = dict([programs.mapping("toy:1.0=proj", KNOWN), programs.mapping("localhost:5000/ml/bert=host", KNOWN)])
    assert tagged == {"toy:1.0": str(tmp_path / "proj"), "localhost:5000/ml/bert": "host"}
    assert programs.by_repository(tagged) == {"toy": str(tmp_path / "proj"), "localhost:5000/ml/bert": "host"}
    plain = programs.resolve("toy:1", {"toy": str(tmp_path / "proj")})
    at = programs.resolve("toy:1", {"toy": f"{tmp_path / 'proj'}:/opt/app"})
    assert plain.code_at({}) == ("/workspace", tmp_path / "proj")
    assert plain.code_at({"workingDir": "/src/"}) == ("/src", tmp_path / "proj")
    assert at.code_at({"workingDir": "/src"}) == ("/opt/app", tmp_path / "proj")


@pytest.mark.parametrize(("folder", "hidden"), [("/usr", "/usr/bin"), ("/", "/"), ("/etc/nologin", "/etc"),
                                                ("/workspace/../usr/lib", "")])
def test_a_working_dir_that_picks_where_the_code_mounts_is_checked_as_a_path_would_be(tmp_path, folder, hidden):
    from generator.container.command import PathError

    plain = programs.resolve("toy:1", {"toy": str(tmp_path)})
    with pytest.raises(PathError) as refused:
        plain.code_at({"workingDir": folder})
    assert refused.value.field == "workingDir"
    assert (f"it would hide {hidden}" if hidden else 'contains ".."') in str(refused.value)
    # a known image's name is the known image, not a folder of that name; `host` is host
    (tmp_path / "busybox").mkdir()
    assert programs.mapping("tools=busybox", KNOWN) == ("tools", "busybox")


@pytest.mark.parametrize(("value", "says"), [
    ("toy", "write REPO=host (your own code, run by this machine's python), REPO=DIR[:PATH]"),
    ("toy=", "write REPO=host"),
    ("toy@sha256:0123=host", "REPO is an image's repository, with a tag or without, never a digest, and Docker Hub's "
                             "names short: write toy=host"),
    ("docker.io/library/toy:1.0=host", "write toy:1.0=host"),
    ("docker.io/library/toy=host", "write toy=host"),
    ("toy=no-such-folder", "no-such-folder is not a folder here, nor a known image; write REPO=host"),
    ("toy=.:/", "PATH / would hide"),
    ("toy=.:/usr", "PATH /usr would hide /usr/bin, which the container needs from this machine"),
    ("toy=.:/etc", "PATH /etc would hide /etc"),
    ("toy=.://bin", "PATH //bin would hide /bin"),
    ("toy=.:///usr/", "PATH ///usr/ would hide /usr/bin"),
    ("toy=.:/./usr", "PATH /./usr would hide /usr/bin"),
    ("toy=.:/tmp/../lib", "PATH /tmp/../lib would hide /lib"),
    ("toy=.:/lib64", "PATH /lib64 would hide /lib64"),
    ("toy=.:/sbin/", "PATH /sbin/ would hide /sbin"),
    ("toy=.:/usr/sbin", "PATH /usr/sbin would hide /usr/sbin"),
])
def test_an_image_mapping_that_cannot_work_is_refused_with_what_to_write(value, says, tmp_path):
    with pytest.raises(ValueError) as refused:
        programs.mapping(value, KNOWN, cwd=tmp_path)
    assert says in str(refused.value)


def test_a_folder_gone_since_it_was_mapped_is_refused_like_a_missing_image(tmp_path):
    with pytest.raises(programs.ImagePullError) as refused:
        programs.resolve("toy:1", {"toy": str(tmp_path / "gone")})
    assert f'image "toy:1" is the folder {tmp_path / "gone"}, which is not there any more' in str(refused.value)


def test_a_newline_in_an_image_mapping_is_refused_before_it_reaches_a_containerfile(tmp_path):
    """PATH becomes `COPY . PATH` in the layer's Containerfile: a newline would add a RUN of its own (as root)."""
    from tests.support.cli_helpers import run

    value = f"registry.example.com/ml/app:1={tmp_path}:/app\nRUN touch /pwned"
    code, out, err = run("cluster", "up", "--image", value)
    assert code == 2 and out == ""
    assert "a control character (a newline, a tab) has no place in REPO, DIR or PATH" in err
