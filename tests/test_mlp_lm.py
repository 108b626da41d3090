"""The MLP language model (Bengio et al. 2003): the formula by hand, the context it sees, bad input."""

import pytest
import torch

from course_lib.mlp_lm import MLPLanguageModel


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
