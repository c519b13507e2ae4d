"""Which registries are asked for an image's config, and what the refusal says when none gives it."""
import pytest

from generator.images import distribution, registry


def test_offline_only_the_registry_here_is_asked_and_the_refusal_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(distribution.OFFLINE_ENV, "1")
    reader = distribution.Reader(local=registry.Registry(tmp_path / "none"))
    with pytest.raises(distribution.Unreadable) as caught:
        reader.config("registry.example.com/ml/app:1")
    assert str(caught.value) == ("registry.example.com/ml/app:1: the registry on this machine is not running (`python -m "
                                 "generator image registry up` starts it); other registries are not asked offline "
                                 "(PYTORCHJOB_KIT_OFFLINE)")
