"""What a finished run leaves: the model's weights, loadable into the network, and metrics.json
with the run's accuracies and throughput."""
import json

import torch

from trainer import config, results
from trainer.distributed import Launch
from trainer.model import Net
from trainer.progress import Progress


def test_a_finished_run_writes_its_weights_and_metrics(tmp_path, capsys):
    cfg = config.parse(["--dataset", "synthetic", "--epochs", "2", "--output-dir", str(tmp_path)])
    history = {"epoch_accuracies": [0.5, 0.75], "epoch_losses": [1.0, 0.5], "train_seconds": 2.0, "samples": 300,
               "elapsed_seconds": 3.0}
    results.write(cfg, Launch(0, 2, 0, "gloo", torch.device("cpu"), "127.0.0.1:0"), Net(), history, 7, tmp_path,
                  Progress(True, 1, 10), "gloo")
    Net().load_state_dict(torch.load(tmp_path / "mnist_cnn.pt"))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert {k: metrics[k] for k in ("dataset", "world_size", "epochs", "steps_per_rank", "final_accuracy",
                                    "samples_per_second", "allreduce", "seed")} == {
        "dataset": "synthetic", "world_size": 2, "epochs": 2, "steps_per_rank": 7, "final_accuracy": 0.75,
        "samples_per_second": 150.0, "allreduce": "gloo", "seed": cfg.seed}
    assert f"wrote {tmp_path / 'mnist_cnn.pt'} and {tmp_path / 'metrics.json'}" in capsys.readouterr().out
