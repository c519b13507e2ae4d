"""How a v1 command starts under Trainer v2: through torchrun, with the program's own words kept."""
import pytest

from generator.convert import launch


@pytest.mark.parametrize("command, started, how", [
    (["torchrun", "--nnodes=2", "t.py"], ["torchrun", "--nnodes=2", "t.py"], launch.THROUGH_TORCHRUN),
    (["/opt/conda/bin/torchrun", "t.py"], ["torchrun", "t.py"], launch.THROUGH_TORCHRUN),
    (["python3.11", "-m", "torch.distributed.run", "t.py"], ["torchrun", "t.py"], launch.TORCHRUN_AS_MODULE),
    (["python", "t.py", "--lr", "1"], ["torchrun", "t.py", "--lr", "1"], launch.HANDED_TO_TORCHRUN),
    (["python", "-m", "trainer"], ["torchrun", "--module", "trainer"], launch.HANDED_TO_TORCHRUN),
    (["python", "-X", "dev", "t.py"], ["torchrun", "--no-python", "python", "-X", "dev", "t.py"], launch.HANDED_TO_TORCHRUN),
    (["bash", "run.sh"], ["torchrun", "--no-python", "bash", "run.sh"], launch.HANDED_TO_TORCHRUN),
    (["pythonic-tool"], ["torchrun", "--no-python", "pythonic-tool"], launch.HANDED_TO_TORCHRUN),
])
def test_each_command_gets_a_torchrun_start_that_runs_the_same_program(command, started, how):
    assert launch.through_torchrun(command) == (started, how)


def test_the_deprecated_launcher_is_not_wrapped_in_a_second_one():
    with pytest.raises(launch.OldLauncher):
        launch.through_torchrun(["python", "-m", "torch.distributed.launch", "--use-env", "t.py"])
