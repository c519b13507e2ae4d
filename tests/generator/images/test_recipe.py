"""An image is rebuilt only when what it is built from changes: the Dockerfile, the files its COPY
names (and the ignore file), its build arguments and its base; nothing else in the context."""
import shutil

from generator import paths
from generator.images import recipe


def _context(tmp_path):
    context = tmp_path / "ctx"
    context.mkdir()
    for name in ("pyproject.toml", "constraints.txt", "README.md", ".dockerignore"):
        shutil.copy(paths.ROOT / name, context / name)
    shutil.copytree(paths.ROOT / "trainer", context / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    (context / "trainer" / "Dockerfile").unlink()
    dockerfile = tmp_path / "Dockerfile"
    shutil.copy(paths.TRAINER_DOCKERFILE, dockerfile)
    (context / "generator").mkdir()
    (context / "generator" / "cli.py").write_text("print('not in the image')\n")
    return recipe.Recipe("example/trainer:1", dockerfile, context, {"VARIANT": "gpu"})


def test_the_trainer_image_is_built_from_the_files_its_dockerfile_copies(tmp_path):
    job = _context(tmp_path)
    copied = {str(p.relative_to(job.context)) for p in job.copied()}
    assert {"pyproject.toml", "constraints.txt", "README.md", ".dockerignore", "trainer/train.py"} <= copied
    assert not any(c.startswith("generator") for c in copied)


def test_the_key_changes_with_the_code_the_image_copies_and_with_nothing_else(tmp_path):
    job = _context(tmp_path)
    first = job.key("base-1")
    (job.context / "generator" / "cli.py").write_text("print('changed')\n")
    assert job.key("base-1") == first  # not copied into the image
    (job.context / "trainer" / "train.py").write_text((job.context / "trainer" / "train.py").read_text() + "\n# x\n")
    changed = job.key("base-1")
    assert changed != first
    assert job.key("base-2") != changed  # a new base
    assert recipe.Recipe(job.tag, job.dockerfile, job.context, {"VARIANT": "cpu"}).key("base-1") != changed
    job.dockerfile.write_text(job.dockerfile.read_text() + "LABEL x=y\n")
    assert job.key("base-1") != changed


def test_a_stamp_stands_for_a_context_made_only_to_build(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY rootfs/ /\n")
    one = recipe.Recipe("x:1", tmp_path / "Dockerfile", tmp_path, stamp="binary in folder a")
    assert one.key() == recipe.Recipe("x:1", tmp_path / "Dockerfile", tmp_path, stamp="binary in folder a").key()
    assert one.key() != recipe.Recipe("x:1", tmp_path / "Dockerfile", tmp_path, stamp="binary in folder b").key()


def test_links_in_the_context_are_not_followed(tmp_path):
    """A link counts as its target's name, as COPY copies it: a file outside the context (or
    /proc/kcore, whose read stalls root) is never read, here or through a linked folder."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("one\n")
    context = tmp_path / "ctx"
    (context / "data").mkdir(parents=True)
    (context / "data" / "train.csv").write_text("1,2\n")
    (context / "data" / "secret").symlink_to(outside / "secret")
    (context / "data" / "elsewhere").symlink_to(outside, target_is_directory=True)
    (context / "kcore").symlink_to("/proc/kcore")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM base\nCOPY data /data/\nCOPY kcore elsewhere/* /x/\n")
    job = recipe.Recipe("example/own:1", dockerfile, context)
    assert {str(p.relative_to(context)) for p in job.copied()} == {"data/train.csv", "data/secret", "data/elsewhere",
                                                                    "kcore"}
    first = job.key()
    (outside / "secret").write_text("two\n")
    assert job.key() == first
    (context / "data" / "secret").unlink()
    (context / "data" / "secret").symlink_to(outside / "other")
    assert job.key() != first  # the link itself changed


def test_a_multi_stage_dockerfile_copies_from_its_stages_and_from_the_contexts_top(tmp_path):
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "app.py").write_text("print(1)\n")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM base AS build\nRUN make\nFROM base\nCOPY --from=build /out/bin /usr/bin/\n"
                          "COPY /app.py /app/\n")
    job = recipe.Recipe("example/own:1", dockerfile, context)
    assert [p.name for p in job.copied()] == ["app.py"]
    first = job.key()
    (context / "app.py").write_text("print(2)\n")
    assert job.key() != first
