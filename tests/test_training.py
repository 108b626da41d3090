"""The trainer: schedule, optimizer groups, batches, exact resume, checkpoints, the command line, DDP."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch

from course_lib import runtime
from course_lib.checkpoints import (
    CheckpointError,
    load_checkpoint,
    load_model,
    read_metadata,
    save_checkpoint,
    save_model,
)
from course_lib.data import prepare_data, stdlib_docs
from course_lib.model import GPT, GPTConfig
from course_lib.pretrained import load_pretrained
from course_lib.runtime import native_bf16
from course_lib.training import TrainConfig, Trainer, WindowBatches, autocast_dtype, lr_at, make_optimizer

CONFIG = GPTConfig(vocab_size=40, context_length=16, n_layers=2, n_heads=2, d_model=32, dropout=0.1)


@pytest.fixture
def data():
    torch.manual_seed(0)
    ids = torch.randint(0, 40, (3000,))
    return ids[:2500], ids[2500:]


def fresh_model(seed: int = 1) -> GPT:
    torch.manual_seed(seed)
    return GPT(CONFIG)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_schedule_warms_up_linearly_then_follows_a_cosine():
    c = TrainConfig(steps=110, lr=1.0, min_lr=0.1, warmup_steps=10)
    assert [lr_at(s, c) for s in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert lr_at(9, c) == pytest.approx(1.0)  # the peak at the end of warmup
    assert lr_at(60, c) == pytest.approx(0.1 + 0.9 * 0.5)  # half way down the cosine
    assert lr_at(110, c) == pytest.approx(0.1)
    values = [lr_at(s, c) for s in range(10, 110)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # monotone decay
    assert lr_at(0, TrainConfig(steps=5, lr=2.0)) == 2.0  # no warmup: starts at the peak


def test_bad_configs_name_the_problem():
    with pytest.raises(ValueError, match="warmup_steps=200 must be between 0 and steps=100"):
        TrainConfig(steps=100, warmup_steps=200)
    with pytest.raises(ValueError, match="batch_size=10 must be divisible by grad_accum=3"):
        TrainConfig(batch_size=10, grad_accum=3)
    with pytest.raises(ValueError, match="min_lr"):
        TrainConfig(lr=1e-3, min_lr=1e-2)


def test_precision_auto_follows_the_hardware_and_bf16_still_learns(data):
    cpu = torch.device("cpu")
    assert autocast_dtype("fp32", cpu) is None and autocast_dtype("bf16", cpu) is torch.bfloat16
    assert autocast_dtype("auto", cpu) == (torch.bfloat16 if native_bf16(cpu) else None)
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        TrainConfig(precision="fp16")
    train, val = data
    losses = {}
    for precision in ("fp32", "bf16"):
        model = fresh_model()
        config = TrainConfig(steps=30, batch_size=8, context_length=16, lr=3e-3, eval_every=30, precision=precision)
        losses[precision] = Trainer(model, train, val, config, progress=False).train().train_loss[-1]
        assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32
    assert losses["bf16"] == pytest.approx(losses["fp32"], abs=0.05)


def test_precision_auto_on_a_gpu_uses_bf16_only_for_wide_models(monkeypatch):
    """Small models on a GPU are launch-bound: autocast's casts make them slower (measured 30%)."""
    monkeypatch.setattr("course_lib.training.native_bf16", lambda device: True)
    cuda = torch.device("cuda")
    assert autocast_dtype("auto", cuda, width=128) is None and autocast_dtype("auto", cuda) is None
    assert autocast_dtype("auto", cuda, width=768) is torch.bfloat16
    assert autocast_dtype("auto", torch.device("cpu"), width=128) is torch.bfloat16  # AMX pays off at any width
    assert autocast_dtype("bf16", cuda, width=128) is torch.bfloat16  # asked for explicitly


def test_compiled_training_computes_what_eager_training_computes(data, monkeypatch):
    """The model and its loss traced as one graph. Inductor's C++ build takes a minute on a
    2-core CPU, so the test traces with AOTAutograd only (the same graph, run eagerly)."""
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend="aot_eager", **kw))
    train, val = data
    results = {}
    for compiled in (False, True):
        torch.manual_seed(1)
        model = GPT(GPTConfig(**{**CONFIG.__dict__, "dropout": 0.0}))  # compiled dropout draws other numbers
        config = TrainConfig(
            steps=3, batch_size=8, context_length=16, lr=3e-3, eval_every=3, precision="fp32", compile=compiled
        )
        results[compiled] = Trainer(model, train, val, config, progress=False).train().train_loss[-1]
    assert results[True] == pytest.approx(results[False], abs=1e-4)


def test_a_dataset_shorter_than_one_batch_is_refused():
    ids = torch.arange(100) % 40
    with pytest.raises(ValueError, match="fewer than one batch of 16"):
        Trainer(fresh_model(), ids, ids, TrainConfig(batch_size=16, context_length=16), progress=False)


def test_weight_decay_applies_to_matrices_only():
    model = fresh_model()
    decay, no_decay = make_optimizer(model, TrainConfig(weight_decay=0.1)).param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))  # tied head once


def test_batches_are_a_function_of_seed_and_step():
    ids = torch.arange(1000)
    a, b = WindowBatches(ids, 9, 4, seed=3), WindowBatches(ids, 9, 4, seed=3)
    assert torch.equal(a[57][0], b[57][0]) and torch.equal(a[2][0], b[2][0])  # in any order
    epoch = torch.cat([a[i][0][:, 0] for i in range(a.per_epoch)])  # first token of each window
    assert len(set(epoch.tolist())) == a.per_epoch * 4  # an epoch never repeats a window
    assert not torch.equal(a[0][0], a[a.per_epoch][0])  # the next epoch is reshuffled
    x, y = a[5]
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


def test_gradient_accumulation_equals_one_big_batch(data):
    """Mean of 4 micro-batch losses / 4 gives the gradient of the whole batch."""
    train, val = data
    no_dropout = GPTConfig(**{**CONFIG.__dict__, "dropout": 0.0})
    models = []
    for accum in (1, 4):
        torch.manual_seed(1)
        model = GPT(no_dropout)
        config = TrainConfig(
            steps=3, batch_size=8, context_length=16, lr=1e-3, grad_accum=accum, eval_every=10, precision="fp32"
        )
        trainer = Trainer(model, train, val, config, progress=False)
        if accum == 4:  # micro-batch i of the accumulated run = rows of batch i // 4 of the other
            trainer.batches = _Regrouped(WindowBatches(train, 16, 8, seed=0), 4)
        trainer.train()
        models.append(model)
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(p, q, atol=2e-5, rtol=1e-4)


class _Regrouped:
    def __init__(self, batches, parts):
        self.batches, self.parts = batches, parts

    def __getitem__(self, i):
        x, y = self.batches[i // self.parts]
        n = x.shape[0] // self.parts
        k = i % self.parts
        return x[k * n : (k + 1) * n], y[k * n : (k + 1) * n]


def test_clipping_bounds_the_gradient_norm(data, monkeypatch):
    train, val = data
    norms = []
    real_step = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        grads = [p.grad.flatten() for g in self.param_groups for p in g["params"] if p.grad is not None]
        norms.append(torch.cat(grads).norm().item())
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    Trainer(
        fresh_model(),
        train,
        val,
        TrainConfig(steps=3, batch_size=8, context_length=16, lr=1e-3, grad_clip=1e-3),
        progress=False,
    ).train()
    assert max(norms) <= 1e-3 * (1 + 1e-4)


def test_training_lowers_the_loss_and_records_history(data):
    train, val = data
    model = fresh_model()
    trainer = Trainer(
        model,
        train,
        val,
        TrainConfig(steps=40, batch_size=8, context_length=16, lr=3e-3, eval_every=20, warmup_steps=5),
        sample=lambda m: "sample",
        progress=False,
    )
    trainer.config.sample_every = 20
    h = trainer.train()
    assert h.steps == [20, 40] and h.train_loss[-1] < math.log(40)
    assert h.samples == [(20, "sample"), (40, "sample")] and h.tokens_seen == 40 * 8 * 16
    assert h.lr[0] == pytest.approx(lr_at(19, trainer.config))
    assert not model.training


def test_resuming_reproduces_an_uninterrupted_run_exactly(data, tmp_path):
    """Dropout on, accumulation on, stopped mid-epoch and mid-schedule: same weights to the bit."""
    train, val = data
    config = TrainConfig(
        steps=30, batch_size=8, context_length=16, lr=3e-3, warmup_steps=5, eval_every=10, grad_accum=2
    )
    straight = fresh_model()
    Trainer(straight, train, val, config, progress=False).train()

    first = Trainer(fresh_model(), train, val, config, progress=False)
    first.train(until=13)
    first.save(tmp_path / "run.safetensors")
    torch.manual_seed(1234)  # a different random state and a different model to resume into
    resumed_model = fresh_model(seed=99)
    resumed = Trainer.resume(tmp_path / "run.safetensors", resumed_model, train, val, progress=False)
    assert resumed.step == 13 and resumed.history.steps == [10]
    history = resumed.train()
    assert same_weights(straight, resumed_model)
    assert history.steps == [10, 20, 30]


def test_checkpoints_hold_no_pickle_and_are_written_atomically(data, tmp_path, monkeypatch):
    train, val = data
    trainer = Trainer(fresh_model(), train, val, TrainConfig(steps=2, batch_size=8, context_length=16), progress=False)
    trainer.train()
    path = tmp_path / "ck.safetensors"
    trainer.save(path, settings={"note": 1})
    tensors = safetensors.torch.load_file(path)  # plain tensors, nothing to unpickle
    assert "model.lm_head.weight" not in tensors  # the tied head is stored once
    assert {"rng.cpu", "optimizer.0.exp_avg"} <= set(tensors)
    assert read_metadata(path)["extra"]["settings"] == {"note": 1}
    before = path.read_bytes()

    def crash(src, dst):  # the process dies after the new bytes were written, before the rename
        assert Path(src).read_bytes() != before
        raise KeyboardInterrupt

    monkeypatch.setattr("course_lib.files.os.replace", crash)
    with pytest.raises(KeyboardInterrupt):
        trainer.save(path)
    assert path.read_bytes() == before  # the old checkpoint survives the crash intact
    assert [p.name for p in tmp_path.iterdir()] == ["ck.safetensors"]  # no temporary left behind


def test_resuming_into_another_shape_is_refused(data, tmp_path):
    train, val = data
    trainer = Trainer(fresh_model(), train, val, TrainConfig(steps=2, batch_size=8, context_length=16), progress=False)
    trainer.save(tmp_path / "ck.safetensors")
    wider = GPT(GPTConfig(**{**CONFIG.__dict__, "d_model": 48}))
    with pytest.raises(
        CheckpointError, match=r"another shape: transformer.wte.weight is \(40, 32\) there but \(40, 48\)"
    ):
        Trainer.resume(tmp_path / "ck.safetensors", wider, train, val)
    deeper = GPT(GPTConfig(**{**CONFIG.__dict__, "n_layers": 3}))
    with pytest.raises(CheckpointError, match=r"does not fit this model: missing \['transformer.h.2"):
        Trainer.resume(tmp_path / "ck.safetensors", deeper, train, val)


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3),  # one plain group
        lambda m: torch.optim.SGD(
            [{"params": list(m.parameters())[:3]}, {"params": list(m.parameters())[3:], "lr": 0.5}],
            lr=0.1,
            momentum=0.9,
        ),
        lambda m: torch.optim.Adam([{"params": [p]} for p in m.parameters()], lr=1e-3),  # a group per tensor
    ],
    ids=["adamw-one-group", "sgd-two-groups", "adam-many-groups"],
)
def test_any_optimizer_resumes_exactly_through_a_path_or_a_file_object(make_optimizer, tmp_path):
    """A training loop of the student's own: checkpoint at step 3, resume, same weights at step 6."""
    import io

    x = torch.randint(0, 40, (4, 16))

    def steps(model, optimizer, n):
        model.train()
        for _ in range(n):
            loss = model(x).logsumexp(-1).mean()  # any loss; dropout draws random numbers
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    straight = fresh_model()
    opt = make_optimizer(straight)
    torch.manual_seed(5)
    steps(straight, opt, 6)

    first = fresh_model()
    opt = make_optimizer(first)
    torch.manual_seed(5)
    steps(first, opt, 3)
    buffer = io.BytesIO()
    save_checkpoint(buffer, first, opt, step=3, extra={"note": [1, 2]})
    save_checkpoint(tmp_path / "ck.safetensors", first, opt, step=3, extra={"note": [1, 2]})
    steps(first, opt, 2)  # the random state moves on
    for source in (io.BytesIO(buffer.getvalue()), tmp_path / "ck.safetensors"):
        model = fresh_model(seed=42)
        optimizer = make_optimizer(model)
        checkpoint = load_checkpoint(source, model, optimizer)
        assert checkpoint.step == 3 and checkpoint.extra == {"note": [1, 2]} and checkpoint.config["d_model"] == 32
        steps(model, optimizer, 3)
        assert same_weights(model, straight)


def test_checkpoints_refuse_another_optimizer_layout_and_damaged_files(tmp_path):
    import io

    model = fresh_model()
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, 40, (2, 8))).sum().backward()
    adamw.step()
    path = tmp_path / "ck.safetensors"
    save_checkpoint(path, model, adamw, step=1)
    with pytest.raises(
        CheckpointError,
        match=r"another optimizer layout: AdamW with parameter groups of \[\d+\] tensors, but this is SGD",
    ):
        load_checkpoint(path, fresh_model(), torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(CheckpointError, match=r"another optimizer layout: .* but this is AdamW with \[\d+, \d+\]"):
        load_checkpoint(path, fresh_model(), make_optimizer(model, TrainConfig()))
    with pytest.raises(
        CheckpointError, match=r"another shape: transformer.wte.weight is \(40, 32\) there but \(40, 48\)"
    ):
        load_checkpoint(path, GPT(GPTConfig(**{**CONFIG.__dict__, "d_model": 48})))
    data = path.read_bytes()
    for damaged, what in [
        (data[: len(data) // 2], "truncated"),
        (data[:5], "truncated"),
        (b"", "truncated"),
        (b"PK\x03\x04 a zip file, not a checkpoint", "truncated"),
        (b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}", "not JSON"),
    ]:
        with pytest.raises(CheckpointError, match=what):
            load_checkpoint(io.BytesIO(damaged), fresh_model())
    save_model(tmp_path / "m.safetensors", model)
    with pytest.raises(CheckpointError, match="has format 'course_lib-model v1', expected 'course_lib-checkpoint v2'"):
        load_checkpoint(tmp_path / "m.safetensors", fresh_model())
    with pytest.raises(CheckpointError, match="holds no optimizer state"):
        save_checkpoint(tmp_path / "weights-only.safetensors", model)
        load_checkpoint(tmp_path / "weights-only.safetensors", fresh_model(), adamw)


def test_checkpoints_keep_every_devices_random_state(monkeypatch, tmp_path):
    """Dropout on a GPU draws from the GPU's generator: a checkpoint keeps each device's state."""
    gpu_states = [torch.tensor([1, 2, 3], dtype=torch.uint8), torch.tensor([4, 5], dtype=torch.uint8)]
    restored = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: gpu_states)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.__setitem__(device, state))
    model = fresh_model()
    save_checkpoint(tmp_path / "ck.safetensors", model)
    assert {"rng.cpu", "rng.cuda.0", "rng.cuda.1"} <= set(safetensors.torch.load_file(tmp_path / "ck.safetensors"))
    cpu_state = torch.get_rng_state()
    torch.rand(10)
    load_checkpoint(tmp_path / "ck.safetensors", model)
    assert torch.equal(torch.get_rng_state(), cpu_state)
    assert torch.equal(restored[0], gpu_states[0]) and torch.equal(restored[1], gpu_states[1])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # resumed on a machine with one GPU
    restored.clear()
    runtime.set_rng_state(runtime.rng_state() | {"cuda.1": gpu_states[1]})
    assert list(restored) == [0]


def test_model_files_round_trip_and_are_not_checkpoints(tmp_path):
    model = fresh_model().eval()
    save_model(tmp_path / "m.safetensors", model, note={"a": [1, 2]})
    loaded, notes = load_model(tmp_path / "m.safetensors")
    assert notes == {"note": {"a": [1, 2]}} and loaded.config == model.config
    x = torch.randint(0, 40, (2, 10))
    assert torch.equal(loaded(x), model(x))
    with pytest.raises(CheckpointError, match="expected 'course_lib-checkpoint v2'"):
        Trainer.resume(tmp_path / "m.safetensors", fresh_model(), torch.arange(500) % 40, torch.arange(500) % 40)
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_model(tmp_path / "junk.safetensors")


def test_prepare_data_trains_the_tokenizer_on_training_text_with_document_ends():
    data = prepare_data("stdlib-docs", "bpe", vocab_size=300)
    assert data.tokenizer.vocab_size == 300 and data.eos_id == 299
    ends = int((data.train_ids == data.eos_id).sum() + (data.val_ids == data.eos_id).sum())
    assert ends == len(stdlib_docs()) - 1 and data.val_ids[0] == data.eos_id  # split between topics
    assert data.tokenizer.decode(data.train_ids[:200].tolist()).startswith('The "assert" statement')
    chars = prepare_data("stdlib-docs", "char")
    assert chars.eos_id is None and len(chars.train_ids) == pytest.approx(9 * len(chars.val_ids), rel=0.01)
    with pytest.raises(ValueError, match="unknown tokenizer 'words'"):
        prepare_data(tokenizer="words")


# --------------------------------------------------------------------------------------
# the command line, on one process and on two (DDP over gloo)
# --------------------------------------------------------------------------------------

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
