"""Checkpoints are all-or-nothing: a write cut off half-way leaves the previous checkpoint
the newest complete one, and no torn file where a resume would look."""
import pytest
import torch

from trainer import checkpoint


def _state(epoch: int) -> dict:
    return {"model": {"w": torch.full((4,), float(epoch))}, "optimizer": {}, "scheduler": {}, "epoch": epoch, "step": 0}


class Interrupted(Exception):
    pass


def test_a_write_cut_off_half_way_leaves_the_previous_checkpoint_newest(tmp_path, monkeypatch):
    checkpoint.save(tmp_path, _state(1), keep=3)
    real_save = torch.save

    def torn(obj, handle, *args, **kwargs):
        handle.write(b"PK\x03\x04 half a zip")  # some bytes reach the disk, then the pod dies
        raise Interrupted

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(Interrupted):
        checkpoint.save(tmp_path, _state(2), keep=3)
    monkeypatch.setattr(torch, "save", real_save)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-e0001-s000000.pt"]
    state, path = checkpoint.load_newest(tmp_path)
    assert state["epoch"] == 1 and path.name == "ckpt-e0001-s000000.pt"


def test_a_torn_file_from_elsewhere_is_skipped_for_the_last_good_one(tmp_path, capsys):
    checkpoint.save(tmp_path, _state(1), keep=3)
    checkpoint.path_for(tmp_path, 2, 0).write_bytes(b"not a checkpoint")
    state, _ = checkpoint.load_newest(tmp_path)
    assert state["epoch"] == 1
    assert "skipping unreadable checkpoint" in capsys.readouterr().err


def test_only_the_newest_are_kept(tmp_path):
    for epoch in range(1, 6):
        checkpoint.save(tmp_path, _state(epoch), keep=2)
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["ckpt-e0005-s000000.pt", "ckpt-e0004-s000000.pt"]


def test_a_full_disk_leaves_the_previous_checkpoint_newest_and_no_temp_file(tmp_path):
    from tests.support.full_disk import full_folder, left

    with full_folder(tmp_path, lambda folder: checkpoint.save(folder, _state(1), keep=3)) as full:
        with pytest.raises(OSError):
            checkpoint.save(full, {**_state(2), "model": {"w": torch.zeros(65536)}}, keep=3)
        assert left(full) == ["ckpt-e0001-s000000.pt"]
        assert checkpoint.load_newest(full)[0]["epoch"] == 1
