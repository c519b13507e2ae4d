"""Reading an image's config: the names a pull resolves, the logins `docker login` writes, and
what a container that sets no command runs. The registries themselves are e2e/test_images.py's."""
import base64
import json

import pytest

from generator.errors import UserError
from generator.images import distribution
from generator.images.distribution import ImageConfig, Ref


def test_names_resolve_to_the_registry_a_pull_asks():
    assert distribution.parse("python:3.11-slim") == Ref("docker.io", "library/python", "3.11-slim")
    assert distribution.parse("ghcr.io/kubeflow/x@sha256:ab") == Ref("ghcr.io", "kubeflow/x", "sha256:ab")
    assert distribution.parse("127.0.0.1:5000/ml/app") == Ref("127.0.0.1:5000", "ml/app", "latest")
    assert distribution.parse("alpine:3.10").api == "registry-1.docker.io"


def write(tmp_path, data) -> str:
    path = tmp_path / "config.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_logins_are_read_as_docker_login_writes_them(tmp_path):
    token = base64.b64encode(b"ml:s3cr:et").decode()
    path = write(tmp_path, {"auths": {"https://index.docker.io/v1/": {"auth": token},
                                      "https://harbor.example.com": {"auth": token},
                                      "127.0.0.1:5000": {"username": "u", "password": "p"}},
                            "credsStore": "desktop"})
    assert distribution.load_auths(path) == {"docker.io": ("ml", "s3cr:et"), "harbor.example.com": ("ml", "s3cr:et"),
                                             "127.0.0.1:5000": ("u", "p")}


@pytest.mark.parametrize("content, said", [
    (None, "no such file; give the config.json `docker login` writes (~/.docker/config.json), or leave the option out"),
    ("{not json", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); a docker "
                  'config.json is {"auths": {"HOST": {"auth": "BASE64 of USER:PASSWORD"}}}'),
    ('{"auths": []}', "has no `auths` object, so no login to use"),
    ('{"auths": {"ghcr.io": {"auth": "not*base64"}}}', "auths.ghcr.io.auth is not base64 (got 'not*base64'); write it "
                                                        "as the output of `printf %s USER:PASSWORD | base64 -w0`"),
    ('{"auths": {"ghcr.io": {"auth": "bm9jb2xvbg=="}}}', "auths.ghcr.io.auth decodes to no USER:PASSWORD (no colon)"),
], ids=["missing", "bad JSON", "no auths", "bad base64", "no colon"])
def test_a_bad_config_file_is_named_with_the_fix(tmp_path, content, said):
    path = str(tmp_path / "config.json") if content is None else write(tmp_path, content)
    with pytest.raises(UserError) as caught:
        distribution.load_auths(path)
    assert str(caught.value).startswith(f"--registry-config {path}: {said}")


def test_args_replace_the_cmd_and_follow_the_entrypoint_as_kubernetes_runs_them():
    config = ImageConfig(("python", "/workspace/train.py"), ("--epochs", "3"), "/workspace", "1000")
    assert config.runs(None) == ["python", "/workspace/train.py", "--epochs", "3"]
    assert config.runs(["--epochs", "1"]) == ["python", "/workspace/train.py"]
    assert ImageConfig((), ("python", "train.py"), "", "").runs([]) == ["python", "train.py"]


def test_offline_only_the_registry_here_is_asked_and_the_refusal_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(distribution.OFFLINE_ENV, "1")
    reader = distribution.Reader(local=distribution.registry.Registry(tmp_path / "none"))
    with pytest.raises(distribution.Unreadable) as caught:
        reader.config("registry.example.com/ml/app:1")
    assert str(caught.value) == ("registry.example.com/ml/app:1: the registry on this machine is not running (`python -m "
                                 "generator image registry up` starts it); other registries are not asked offline "
                                 "(PYTORCHJOB_KIT_OFFLINE)")
