"""Where the project's own files live, found from this package so any working directory works."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHARTS = ROOT / "charts"
JOB_CHART = CHARTS / "pytorchjob"
OPERATOR_CHART = CHARTS / "pytorch-operator"
TRAINER_DOCKERFILE = ROOT / "trainer" / "Dockerfile"
SCHEMA = JOB_CHART / "values.schema.json"  # the top-level values.schema.json is a link to it


def cache_dir() -> Path:
    """The user's cache for this tool: $PYTORCHJOB_KIT_CACHE, else the XDG cache folder. For root,
    who runs the binaries built there and keeps the registry's keys there, only a folder no other
    user could swap (generator/trusted.py)."""
    import os

    if os.environ.get("PYTORCHJOB_KIT_CACHE"):
        folder = Path(os.environ["PYTORCHJOB_KIT_CACHE"])
    else:
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytorchjob-kit"
    if os.geteuid() == 0:
        from generator import trusted

        folder = trusted.check(folder, "the cache folder", "set PYTORCHJOB_KIT_CACHE to a folder of root's own, "
                                                           "such as /root/.cache/pytorchjob-kit")
    return folder
