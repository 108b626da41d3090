"""Checkpoints and model files: safetensors without pickle, atomic, exact resume for any optimizer,
clear refusals of another shape, another optimizer layout or a damaged file."""

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
from course_lib.training import TrainConfig, Trainer, make_optimizer


def test_checkpoints_hold_no_pickle_and_are_written_atomically(random_ids, tmp_path, monkeypatch, fresh_model):
    train, val = random_ids
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


def test_resuming_into_another_shape_is_refused(random_ids, tmp_path, fresh_model):
    train, val = random_ids
    trainer = Trainer(fresh_model(), train, val, TrainConfig(steps=2, batch_size=8, context_length=16), progress=False)
    trainer.save(tmp_path / "ck.safetensors")
    wider = fresh_model(d_model=48)
    with pytest.raises(
        CheckpointError, match=r"another shape: transformer.wte.weight is \(40, 32\) there but \(40, 48\)"
    ):
        Trainer.resume(tmp_path / "ck.safetensors", wider, train, val)
    deeper = fresh_model(n_layers=3)
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
def test_any_optimizer_resumes_exactly_through_a_path_or_a_file_object(
    make_optimizer, tmp_path, fresh_model, same_weights
):
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


def test_checkpoints_refuse_another_optimizer_layout_and_damaged_files(tmp_path, fresh_model):
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
        load_checkpoint(path, fresh_model(d_model=48))
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


def test_checkpoints_keep_the_random_state_of_the_devices_they_train_on(monkeypatch, tmp_path, fresh_model):
    """Dropout on a GPU draws from the GPU's generators: the random state holds them when the work is
    on that GPU, and only then. A model trained on the CPU of a Mac or of a GPU server is checkpointed
    with the CPU's state alone, as anywhere else (notebook 08 counts the tensors)."""
    gpu_states = [torch.tensor([1, 2, 3], dtype=torch.uint8), torch.tensor([4, 5], dtype=torch.uint8)]
    mps_state = torch.tensor([6, 7], dtype=torch.uint8)
    restored = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: gpu_states)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.__setitem__(device, state))
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda: mps_state)
    monkeypatch.setattr(torch.mps, "set_rng_state", lambda state: restored.__setitem__("mps", state))
    model = fresh_model()  # on the CPU
    save_checkpoint(tmp_path / "ck.safetensors", model)
    assert [k for k in safetensors.torch.load_file(tmp_path / "ck.safetensors") if k.startswith("rng.")] == ["rng.cpu"]
    assert list(runtime.rng_state(torch.device("cuda", 0))) == ["cpu", "cuda.0", "cuda.1"]
    assert list(runtime.rng_state("mps")) == ["cpu", "mps"] and list(runtime.rng_state("cpu")) == ["cpu"]
    cpu_state = torch.get_rng_state()
    torch.rand(10)
    runtime.set_rng_state(runtime.rng_state("cuda") | runtime.rng_state("mps") | {"cpu": cpu_state})
    assert torch.equal(torch.get_rng_state(), cpu_state)
    assert torch.equal(restored[0], gpu_states[0]) and torch.equal(restored[1], gpu_states[1])
    assert torch.equal(restored["mps"], mps_state)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # resumed on a machine with one GPU
    restored.clear()
    runtime.set_rng_state(runtime.rng_state("cuda"))
    assert list(restored) == [0]


def test_model_files_round_trip_and_are_not_checkpoints(tmp_path, fresh_model):
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
