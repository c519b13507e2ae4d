"""`image build --steps` (what `make e2e` shows of the trainer image's build): each step as the
engines print it, podman's and Docker's, one line each, and nothing of the steps' own output."""
from generator.cli import image

LINES = ["STEP 1/9: FROM localhost/pytorchjob-kit/debian-python:bookworm-c9597a390b33",
         "Collecting torch==2.13.0", "  Downloading torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl (900 MB)",
         "STEP 5/9: RUN python -m venv /opt/venv && /opt/venv/bin/pip install " + "--no-cache-dir " * 20,
         "#7 [3/6] RUN pip install -c constraints.txt .", "#7 0.512 Collecting numpy", "--> 3f2c1a9b0d1e"]


def test_only_each_step_is_shown_one_line_each(capsys):
    for line in LINES:
        image._steps(line)
    shown = capsys.readouterr().err.splitlines()
    assert shown[0] == LINES[0] and shown[2] == LINES[4] and len(shown) == 3
    assert shown[1].startswith("STEP 5/9: RUN python -m venv") and len(shown[1]) == image.STEP_WIDTH
    assert shown[1].endswith("...")
