"""Where the project's own files live, found from this package so any working directory works."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHARTS = ROOT / "charts"
JOB_CHART = CHARTS / "pytorchjob"
OPERATOR_CHART = CHARTS / "pytorch-operator"
TRAINER_DOCKERFILE = ROOT / "trainer" / "Dockerfile"
SCHEMA = JOB_CHART / "values.schema.json"  # the top-level values.schema.json is a link to it


def cache_dir() -> Path:
    """The user's cache for this tool: $PYTORCHJOB_KIT_CACHE, else the XDG cache folder."""
    import os

    if os.environ.get("PYTORCHJOB_KIT_CACHE"):
        return Path(os.environ["PYTORCHJOB_KIT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pytorchjob-kit"
