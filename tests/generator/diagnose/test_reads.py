"""What diagnose records when a read fails: the API server's refusals and absences are recorded as
such and diagnose goes on with the rest; a bug in reading an answer is not mistaken for them."""
from __future__ import annotations

import pytest
from kubernetes.client import ApiException
from urllib3.exceptions import MaxRetryError

from generator.diagnose import reads


def fails(exc: BaseException):
    def read():
        raise exc
    return read


@pytest.mark.parametrize("exc", [ApiException(status=403, reason="Forbidden"), ApiException(status=404),
                                 MaxRetryError(None, "/api/v1/nodes", "timed out"), TimeoutError("timed out")],
                         ids=["refused", "absent", "unreachable", "timeout"])
def test_an_optional_read_the_server_refuses_is_left_out(exc):
    assert reads.optional(fails(exc)) is None


def test_an_object_that_does_not_exist_is_none_and_one_refused_counts_as_present():
    assert reads.read(fails(ApiException(status=404, reason="Not Found"))) is None
    assert reads.read(fails(ApiException(status=403, reason="Forbidden"))) == {}


@pytest.mark.parametrize("read", [reads.optional, reads.read], ids=["optional", "read"])
def test_a_bug_in_a_reader_surfaces_instead_of_not_readable(read):
    def buggy():
        return {"items": []}["item"]

    with pytest.raises(KeyError, match="item"):
        read(buggy)
