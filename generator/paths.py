"""Where the project's own files live, found from this package so any working directory works."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHARTS = ROOT / "charts"
JOB_CHART = CHARTS / "pytorchjob"
OPERATOR_CHART = CHARTS / "pytorch-operator"
SCHEMA = JOB_CHART / "values.schema.json"  # the top-level values.schema.json is a link to it
