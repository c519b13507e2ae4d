"""Fixtures shared by the generator's tests."""
import pytest

from tests.support.fake_kube_api import FakeKubeAPI


@pytest.fixture
def api(tmp_path, monkeypatch):
    """The HTTP double of the Kubernetes API, with KUBECONFIG pointing at it."""
    server = FakeKubeAPI().start()
    monkeypatch.setenv("KUBECONFIG", server.kubeconfig(tmp_path / "kubeconfig"))
    yield server
    server.stop()
