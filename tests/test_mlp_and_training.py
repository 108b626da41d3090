import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.mlp_lm import MLPLanguageModel
from course_lib.training import History, estimate_loss, lm_loss, train_language_model


def test_mlp_matches_bengio_formula_by_hand():
    torch.manual_seed(0)
    model = MLPLanguageModel(vocab_size=7, context=3, embed_dim=4, hidden=5)
    idx = torch.tensor([[1, 2, 3, 4, 5]])
    logits = model(idx)  # (1, 5, 7)
    assert logits.shape == (1, 5, 7)
    # Position 4 sees tokens 3, 4, 5: concatenate, tanh layer, output layer.
    x = torch.cat([model.embed.weight[i] for i in (3, 4, 5)])
    expected = model.out(torch.tanh(model.hidden(x)))
    assert torch.allclose(logits[0, 4], expected, atol=1e-6)
    # Position 0 sees two padding slots, then token 1.
    x0 = torch.cat([model.embed.weight[7], model.embed.weight[7], model.embed.weight[1]])
    assert torch.allclose(logits[0, 0], model.out(torch.tanh(model.hidden(x0))), atol=1e-6)


def test_mlp_only_sees_its_context():
    torch.manual_seed(0)
    model = MLPLanguageModel(vocab_size=10, context=3)
    a = torch.tensor([[1, 2, 3, 4, 5, 6]])
    b = a.clone()
    b[0, 0] = 9  # more than 3 tokens before the last position
    assert torch.allclose(model(a)[0, -1], model(b)[0, -1])
    assert not torch.allclose(model(a)[0, 2], model(b)[0, 2])


def test_mlp_bad_input():
    with pytest.raises(ValueError, match="context must be at least 1"):
        MLPLanguageModel(10, 0)
    with pytest.raises(ValueError, match="token ids must be in 0..9"):
        MLPLanguageModel(10, 2)(torch.tensor([[10]]))


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
