"""The trainer: the loss, schedule, optimizer groups, batches, precision, accumulation, clipping, exact resume."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.mlp_lm import MLPLanguageModel
from course_lib.runtime import native_bf16
from course_lib.training import (
    History,
    TrainConfig,
    Trainer,
    WindowBatches,
    autocast_dtype,
    estimate_loss,
    lm_loss,
    lr_at,
    make_optimizer,
    train_language_model,
    window_losses,
)


def test_lm_loss_is_flattened_cross_entropy():
    torch.manual_seed(0)
    model = MLPLanguageModel(11, 2)
    x, y = torch.randint(0, 11, (3, 5)), torch.randint(0, 11, (3, 5))
    expected = F.cross_entropy(model(x).reshape(15, 11), y.reshape(15))
    assert torch.allclose(lm_loss(model, x, y), expected)


def test_training_lowers_the_loss_on_a_learnable_sequence():
    torch.manual_seed(0)
    ids = torch.tensor([0, 1, 2, 3, 4] * 200)  # fully predictable from one previous token
    model = MLPLanguageModel(5, context=2, embed_dim=8, hidden=32)
    before = estimate_loss(model, ids, 16)
    history = train_language_model(
        model, ids[:800], ids[800:], context_length=16, batch_size=8, steps=150, lr=1e-2, eval_every=50, progress=False
    )
    assert isinstance(history, History) and history.steps == [50, 100, 150]
    assert before > 1.0 and history.val_loss[-1] < 0.05
    assert not model.training


def test_estimate_loss_is_deterministic_and_restores_mode():
    torch.manual_seed(0)
    model = MLPLanguageModel(5, 2)
    ids = torch.randint(0, 5, (500,), generator=torch.Generator().manual_seed(0))
    model.train()
    a = estimate_loss(model, ids, 10, batch_size=4, max_batches=3)
    assert model.training and a == estimate_loss(model, ids, 10, batch_size=4, max_batches=3)
    assert math.isclose(estimate_loss(model, ids, 10), estimate_loss(model, ids, 10, batch_size=7), rel_tol=1e-5)


def test_window_losses_are_one_per_window_and_average_to_the_loss():
    torch.manual_seed(0)
    model = MLPLanguageModel(5, 2)
    ids = torch.randint(0, 5, (501,), generator=torch.Generator().manual_seed(1))
    model.train()
    losses = window_losses(model, ids, 10, batch_size=7)  # 50 windows of 10 targets
    assert losses.shape == (50,) and model.training
    assert math.isclose(losses.mean().item(), estimate_loss(model, ids, 10), rel_tol=1e-5)
    x, y = ids[20:30], ids[21:31]  # the third window, by hand
    with torch.no_grad():
        model.eval()
        third = torch.nn.functional.cross_entropy(model(x[None])[0], y).item()
    assert math.isclose(losses[2].item(), third, rel_tol=1e-5)


def test_training_rejects_zero_steps():
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        train_language_model(
            MLPLanguageModel(5, 2),
            torch.arange(5).repeat(20),
            torch.arange(5).repeat(5),
            context_length=4,
            batch_size=2,
            steps=0,
            lr=1e-3,
        )


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


def test_precision_auto_follows_the_hardware_and_bf16_still_learns(random_ids, fresh_model):
    cpu = torch.device("cpu")
    assert autocast_dtype("fp32", cpu) is None and autocast_dtype("bf16", cpu) is torch.bfloat16
    assert autocast_dtype("auto", cpu) == (torch.bfloat16 if native_bf16(cpu) else None)
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        TrainConfig(precision="fp16")
    train, val = random_ids
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


def test_compiled_training_computes_what_eager_training_computes(random_ids, monkeypatch, fresh_model):
    """The model and its loss traced as one graph. Inductor's C++ build takes a minute on a
    2-core CPU, so the test traces with AOTAutograd only (the same graph, run eagerly)."""
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend="aot_eager", **kw))
    train, val = random_ids
    results = {}
    for compiled in (False, True):
        model = fresh_model(dropout=0.0)  # compiled dropout draws other numbers
        config = TrainConfig(
            steps=3, batch_size=8, context_length=16, lr=3e-3, eval_every=3, precision="fp32", compile=compiled
        )
        results[compiled] = Trainer(model, train, val, config, progress=False).train().train_loss[-1]
    assert results[True] == pytest.approx(results[False], abs=1e-4)


def test_a_dataset_shorter_than_one_batch_is_refused(fresh_model):
    ids = torch.arange(100) % 40
    with pytest.raises(ValueError, match="fewer than one batch of 16"):
        Trainer(fresh_model(), ids, ids, TrainConfig(batch_size=16, context_length=16), progress=False)


def test_weight_decay_applies_to_matrices_only(fresh_model):
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


def test_gradient_accumulation_equals_one_big_batch(random_ids, fresh_model):
    """Mean of 4 micro-batch losses / 4 gives the gradient of the whole batch."""
    train, val = random_ids
    models = []
    for accum in (1, 4):
        model = fresh_model(dropout=0.0)
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


def test_clipping_bounds_the_gradient_norm(random_ids, monkeypatch, fresh_model):
    train, val = random_ids
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


def test_training_lowers_the_loss_and_records_history(random_ids, fresh_model):
    train, val = random_ids
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


def test_resuming_reproduces_an_uninterrupted_run_exactly(random_ids, tmp_path, fresh_model, same_weights):
    """Dropout on, accumulation on, stopped mid-epoch and mid-schedule: same weights to the bit."""
    train, val = random_ids
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
