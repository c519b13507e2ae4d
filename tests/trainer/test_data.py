"""Data sets, shards and the MNIST loader, on data the tests make."""
import hashlib
import http.server
import threading

import pytest
import torch

from tests.support import mnist_files
from trainer import data


@pytest.mark.parametrize("n, world, batch", [(1437, 3, 64), (10, 3, 4), (7, 2, 64), (1000, 1, 64), (5, 4, 1)])
def test_shards_are_equal_length_disjoint_and_cover_everything(n, world, batch):
    steps = data.steps_per_rank(n, world, batch)
    assert steps == -(-n // (world * batch))
    shards = [data.shard(n, epoch=3, seed=7, rank=r, world_size=world, batch_size=batch) for r in range(world)]
    assert all(s.shape == (steps, batch) for s in shards)
    seen = torch.cat([s.flatten() for s in shards])
    assert set(seen.tolist()) == set(range(n))  # every sample is trained on
    if steps * world * batch <= n:
        assert len(seen.unique()) == len(seen)  # no sample twice when no padding is needed


def test_three_ranks_take_a_third_of_the_single_rank_steps():
    assert data.steps_per_rank(3072, 1, 64) == 48
    assert data.steps_per_rank(3072, 3, 64) == 16


def test_permutation_changes_every_epoch_and_is_seeded():
    a = data.shard(100, 0, 1, 0, 1, 10)
    assert torch.equal(a, data.shard(100, 0, 1, 0, 1, 10))
    assert not torch.equal(a, data.shard(100, 1, 1, 0, 1, 10))
    assert not torch.equal(a, data.shard(100, 0, 2, 0, 1, 10))


@pytest.mark.parametrize("n, world", [(360, 1), (360, 2), (361, 3), (5, 8)])
def test_eval_shards_cover_the_test_set_exactly_once(n, world):
    parts = torch.cat([data.eval_shard(n, r, world) for r in range(world)])
    assert sorted(parts.tolist()) == list(range(n))


def test_digits_are_28x28_and_split_80_20():
    train, test = data.digits()
    assert train.x.shape[1:] == (1, 28, 28) and len(train) + len(test) == 1797
    assert len(test) == 360 and set(train.y.unique().tolist()) == set(range(10))


_write_mnist = mnist_files.write


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_loader_reads_idx_files(tmp_path, gz):
    arrays = _write_mnist(tmp_path, gz=gz)
    train, test = data.mnist(tmp_path)
    assert train.x.shape == (32, 1, 28, 28) and test.x.shape == (8, 1, 28, 28)
    assert torch.equal(train.y, arrays["train-labels-idx1-ubyte"].long())
    pixel = arrays["train-images-idx3-ubyte"][0, 5, 7].item()
    assert train.x[0, 0, 5, 7].item() == pytest.approx((pixel / 255 - data.MEAN) / data.STD, rel=1e-5)


def test_truncated_idx_file_is_a_clear_error(tmp_path):
    _write_mnist(tmp_path, gz=False)
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(data.DataError, match="truncated.*delete it"):
        data.mnist(tmp_path)


def test_offline_download_says_how_to_provide_the_files(tmp_path):
    with pytest.raises(data.DataError) as err:
        data.download_mnist(tmp_path / "mnist", ["http://127.0.0.1:9/"], timeout=2)
    message = str(err.value)
    assert "offline" in message and "train-images-idx3-ubyte" in message and "--dataset digits" in message
    assert str(tmp_path / "mnist") in message
    assert not any((tmp_path / "mnist").iterdir())  # nothing half-written


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def mirror(tmp_path):
    served = tmp_path / "mirror"
    _write_mnist(served)
    handler = lambda *a, **k: _Quiet(*a, directory=str(served), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_download_tries_mirrors_in_order_and_checks_md5(tmp_path, mirror, monkeypatch):
    served, url = mirror
    sums = {name: hashlib.md5((served / f"{name}.gz").read_bytes()).hexdigest() for name in data.MNIST_FILES}
    monkeypatch.setattr(data, "MNIST_FILES", sums)
    target = tmp_path / "downloaded"
    data.download_mnist(target, ["http://127.0.0.1:9/", url], timeout=2)
    train, test = data.mnist(target)
    assert len(train) == 32 and len(test) == 8


def test_download_rejects_a_wrong_checksum(tmp_path, mirror):
    _, url = mirror  # real MNIST checksums, test-made files
    with pytest.raises(data.DataError, match="checksum"):
        data.download_mnist(tmp_path / "bad", [url], timeout=2)
    assert not list((tmp_path / "bad").glob("*.gz"))


class _Stream:
    def __init__(self, tty):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_progress_is_a_bar_on_a_terminal_and_plain_lines_in_logs():
    from trainer.progress import Progress

    tty, log = _Stream(True), _Stream(False)
    for stream in (tty, log):
        progress = Progress(True, steps=4, interval=2, stream=stream)
        for step in range(4):
            progress.step(0, step, loss=0.5, samples=64 * (step + 1))
    assert "\repoch 1 [" in tty.text and "] 4/4 loss 0.5000" in tty.text and tty.text.count("\n") == 1
    assert log.text.splitlines()[0].startswith("epoch 1 step 2/4 loss 0.5000")
    assert len(log.text.splitlines()) == 2 and "\r" not in log.text
    silent = _Stream(False)
    Progress(False, steps=4, interval=1, stream=silent).step(0, 0, 0.1, 64)
    assert silent.text == ""  # ranks other than 0 say nothing


@pytest.mark.parametrize("n, batch", [(1437, 64), (100, 4), (50, 7)])
@pytest.mark.parametrize("old, new", [(3, 2), (3, 4), (2, 3), (4, 3), (2, 2), (4, 1)])
def test_an_epoch_stopped_at_one_world_size_goes_on_at_another_without_skipping_or_repeating(n, batch, old, new):
    steps_before = max(1, data.steps_per_rank(n, old, batch) // 2)
    before = [data.shard(n, 5, 7, r, old, batch)[:steps_before] for r in range(old)]
    position = steps_before * old * batch
    after = [data.shard(n, 5, 7, r, new, batch, start=position) for r in range(new)]
    seen = torch.cat([s.flatten() for s in before + after]).tolist()
    assert set(seen) == set(range(n))  # nothing skipped
    repeats = len(seen) - n
    assert 0 <= repeats < new * batch  # only the last step's padding, as in any epoch
    if (n - position) % (new * batch) == 0:
        assert repeats == 0
    # Stopped and resumed at the same world size, the steps are those of an epoch never stopped.
    if old == new:
        whole = [data.shard(n, 5, 7, r, old, batch) for r in range(old)]
        assert all(torch.equal(whole[r][steps_before:], after[r]) for r in range(old))
