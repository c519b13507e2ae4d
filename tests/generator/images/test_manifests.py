"""An image named as a pull names it, and what a container that sets no command runs of the image's
config. The registries themselves are e2e/test_images.py's."""
from generator.images import manifests
from generator.images.manifests import ImageConfig, Ref


def test_names_resolve_to_the_registry_a_pull_asks():
    assert manifests.parse("python:3.11-slim") == Ref("docker.io", "library/python", "3.11-slim")
    assert manifests.parse("ghcr.io/kubeflow/x@sha256:ab") == Ref("ghcr.io", "kubeflow/x", "sha256:ab")
    assert manifests.parse("127.0.0.1:5000/ml/app") == Ref("127.0.0.1:5000", "ml/app", "latest")
    assert manifests.parse("alpine:3.10").api == "registry-1.docker.io"


def test_args_replace_the_cmd_and_follow_the_entrypoint_as_kubernetes_runs_them():
    config = ImageConfig(("python", "/workspace/train.py"), ("--epochs", "3"), "/workspace", "1000")
    assert config.runs(None) == ["python", "/workspace/train.py", "--epochs", "3"]
    assert config.runs(["--epochs", "1"]) == ["python", "/workspace/train.py"]
    assert ImageConfig((), ("python", "train.py"), "", "").runs([]) == ["python", "train.py"]
