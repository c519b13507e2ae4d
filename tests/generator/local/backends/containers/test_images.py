"""`--image` under --container: the mappings that would run this machine's programs are refused,
saying what to do instead; a copy of the trainer and a folder laid over the job's image are taken."""
from generator.local.backends.containers import images as container_images
from tests.support import local_jobs
from tests.support.cli_helpers import run


def test_image_mappings_that_run_code_of_this_machine_are_refused_with_container(tmp_path):
    body, _ = local_jobs.job("own", "pass")
    path = local_jobs.write(tmp_path, body)
    code, out, err = run("run", path, "--container", "--image", "registry.example.com/ml/toy=host")
    assert code == 1 and out == "" and "Traceback" not in err
    assert ("--image registry.example.com/ml/toy=host: with --container each replica runs its own image" in err
            and "`python -m generator image build DIR -t REPO:TAG`" in err and "REPO=DIR[:PATH]" in err)
    trainer = "ghcr.io/pytorchjob-kit/trainer"
    # A copy of the trainer runs the trainer's image; a folder is laid over the job's image (e2e: test_images.py).
    assert container_images.refuse_aliases({"mirror.example.com/trainer": trainer, "registry.example.com/ml/toy": str(tmp_path)},
                                           trainer) == ({"mirror.example.com/trainer": trainer},
                                                        {"registry.example.com/ml/toy": str(tmp_path)})
