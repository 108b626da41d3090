"""The command line (python -m course_lib.train), on one process and on two (DDP over gloo)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from course_lib.checkpoints import load_model, read_metadata
from course_lib.pretrained import load_pretrained

TINY = [
    "--tokenizer",
    "char",
    "--n-layers",
    "2",
    "--n-heads",
    "2",
    "--d-model",
    "32",
    "--context-length",
    "32",
    "--batch-size",
    "8",
    "--lr",
    "3e-3",
    "--eval-every",
    "10",
    "--eval-batches",
    "4",
    "--precision",
    "fp32",
]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COURSE_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_command_line_trains_and_saves_along_the_way_without_changing_the_run(tmp_path):
    run("-m", "course_lib.train", "--out", "straight", "--steps", "20", *TINY, cwd=tmp_path)
    run("-m", "course_lib.train", "--out", "split", "--steps", "20", "--save-every", "10", *TINY, cwd=tmp_path)
    straight = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    split = json.loads((tmp_path / "split" / "metrics.json").read_text())
    assert straight["weight_digests"] == split["weight_digests"]  # saving along the way changes nothing
    assert straight["history"]["val_loss"][-1] < straight["history"]["val_loss"][0]
    model, tokenizer, notes = load_pretrained(tmp_path / "split" / "model.safetensors")
    assert notes["results"]["steps"] == 20 and tokenizer.vocab_size == model.config.vocab_size
    assert notes["results"]["val_loss"] == straight["val_loss"]


def test_command_line_resume_continues_a_stopped_run(tmp_path):
    run("-m", "course_lib.train", "--out", "straight", "--steps", "20", *TINY, cwd=tmp_path)
    run("-m", "course_lib.train", "--out", "stopped", "--steps", "20", "--stop-at", "10", *TINY, cwd=tmp_path)
    assert read_metadata(tmp_path / "stopped" / "checkpoint.safetensors")["step"] == 10
    run("-m", "course_lib.train", "--out", "stopped", "--resume", "stopped/checkpoint.safetensors", cwd=tmp_path)
    straight = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    resumed = json.loads((tmp_path / "stopped" / "metrics.json").read_text())
    assert resumed["steps"] == 20 and resumed["weight_digests"] == straight["weight_digests"]


def test_torchrun_two_processes_keep_identical_weights_and_learn(tmp_path):
    """DistributedDataParallel on CPU: each rank trains on half of every batch."""
    run(
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "course_lib.train",
        "--out",
        "ddp",
        "--steps",
        "30",
        *TINY,
        cwd=tmp_path,
    )
    run("-m", "course_lib.train", "--out", "single", "--steps", "30", *TINY, cwd=tmp_path)
    ddp = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert ddp["processes"] == 2 and len(ddp["weight_digests"]) == 2
    assert ddp["weight_digests"][0] == ddp["weight_digests"][1]  # the ranks never drifted apart
    losses = ddp["history"]["train_loss"]
    assert losses[-1] < losses[0] - 0.3  # and they learned
    # averaging two half-batch gradients is the full-batch gradient: the same run, up to rounding
    a, _ = load_model(tmp_path / "ddp" / "model.safetensors")
    b, _ = load_model(tmp_path / "single" / "model.safetensors")
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-3)
