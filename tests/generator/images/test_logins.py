"""The logins `docker login` writes, read by registry host; a bad file is named with the fix."""
import base64
import json

import pytest

from generator.errors import UserError
from generator.images import logins


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
    assert logins.load_auths(path) == {"docker.io": ("ml", "s3cr:et"), "harbor.example.com": ("ml", "s3cr:et"),
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
        logins.load_auths(path)
    assert str(caught.value).startswith(f"--registry-config {path}: {said}")
