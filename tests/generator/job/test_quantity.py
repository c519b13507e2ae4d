"""Quantities written back as Kubernetes writes them, for the sums diagnose shows beside the API's own."""
from __future__ import annotations

import pytest

from generator.job import quantity


@pytest.mark.parametrize(("given", "binary", "written"), [
    ("500m", False, "500m"), ("0.5", False, "500m"), ("1.5", False, "1500m"), ("250u", False, "250u"),
    ("2", False, "2"), ("0", False, "0"), ("1500", False, "1500"), ("2000", False, "2k"), ("3e6", False, "3M"),
    ("1Gi", True, "1Gi"), ("1536Mi", True, "1536Mi"), ("1.5Gi", True, "1536Mi"), ("1G", True, "1G"),
    ("100", True, "100"), ("1Gi", False, "1073741824"),
])
def test_a_sum_is_written_as_kubernetes_writes_the_quantity(given, binary, written):
    assert quantity.write(quantity.parse(given), binary) == written
    assert quantity.parse(written) == quantity.parse(given)  # and reads back as the same amount


def test_finer_than_a_nano_unit_is_rounded_up_as_kubernetes_rounds():
    assert quantity.write(quantity.parse("0.0000000001")) == "1n"
