import math

import pytest
import torch

from course_lib.ngram import NGramLanguageModel
from course_lib.tokenization import CharTokenizer


def brute_force_prob(ids, order, vocab_size, alpha, context, token):
    grams = [tuple(ids[i : i + order]) for i in range(len(ids) - order + 1)]
    ctx = tuple(context[len(context) - (order - 1) :]) if order > 1 else ()
    joint = sum(1 for g in grams if g[:-1] == ctx and g[-1] == token)
    total = sum(1 for g in grams if g[:-1] == ctx)
    return (joint + alpha) / (total + alpha * vocab_size)


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("alpha", [1.0, 0.1])
def test_probabilities_match_counting_by_hand(order, alpha):
    g = torch.Generator().manual_seed(order)
    ids = torch.randint(0, 5, (200,), generator=g).tolist()
    model = NGramLanguageModel(order, 5, alpha).fit(ids)
    for context in ([0, 1], [4, 4], [2, 3]):
        probs = model.next_token_probs(context)
        assert probs.shape == (5,)
        assert probs.sum().item() == pytest.approx(1.0, abs=1e-6)
        for token in range(5):
            assert probs[token].item() == pytest.approx(
                brute_force_prob(ids, order, 5, alpha, context, token), rel=1e-6
            )


def test_bigram_known_values_and_cross_entropy():
    model = NGramLanguageModel(2, 3, alpha=0.0).fit([0, 1, 0, 2, 0, 1])
    assert model.next_token_probs([0]).tolist() == pytest.approx([0.0, 2 / 3, 1 / 3])
    # Evaluate on [0, 1, 0]: P(1|0) = 2/3, P(0|1) = 1.
    assert model.cross_entropy([0, 1, 0]) == pytest.approx(-(math.log(2 / 3) + math.log(1.0)) / 2)
    assert model.perplexity([0, 1, 0]) == pytest.approx(math.exp(model.cross_entropy([0, 1, 0])))
    # One loss per position after the first: -log P(1|0), -log P(0|1).
    assert model.token_losses([0, 1, 0]).tolist() == pytest.approx([-math.log(2 / 3), 0.0])
    with pytest.raises(ValueError, match="need at least 2 tokens to evaluate, got 1"):
        model.token_losses([0])


def test_unseen_pair_without_smoothing_has_infinite_loss_and_smoothing_fixes_it():
    ids = [0, 1, 0, 1]
    assert NGramLanguageModel(2, 2, alpha=0.0).fit(ids).cross_entropy([1, 1]) == math.inf
    assert NGramLanguageModel(2, 2, alpha=1.0).fit(ids).cross_entropy([1, 1]) < math.inf


def test_unigram_of_uniform_data_has_log_v_loss():
    ids = list(range(10)) * 10
    model = NGramLanguageModel(1, 10, alpha=0).fit(ids)
    assert model.cross_entropy(ids) == pytest.approx(math.log(10))


def test_sampling_is_reproducible_and_follows_deterministic_chains():
    model = NGramLanguageModel(2, 4, alpha=0.0).fit([0, 1, 2, 3] * 5)
    assert model.sample([0], 7) == [0, 1, 2, 3, 0, 1, 2, 3]
    noisy = NGramLanguageModel(2, 4, alpha=1.0).fit([0, 1, 2, 3] * 5)
    a = noisy.sample([0], 20, generator=torch.Generator().manual_seed(0))
    b = noisy.sample([0], 20, generator=torch.Generator().manual_seed(0))
    assert a == b


def test_large_vocabulary_trigram_is_sparse():
    ids = torch.randint(0, 50257, (5000,), generator=torch.Generator().manual_seed(0))
    model = NGramLanguageModel(3, 50257).fit(ids)
    assert len(model.context_keys) <= 4998
    assert model.next_token_probs(ids[:2]).sum().item() == pytest.approx(1.0, abs=1e-4)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="order must be at least 1"):
        NGramLanguageModel(0, 10)
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        NGramLanguageModel(2, 10, alpha=-1)
    with pytest.raises(ValueError, match="too large"):
        NGramLanguageModel(5, 50257)
    model = NGramLanguageModel(3, 10)
    with pytest.raises(RuntimeError, match="call fit"):
        model.next_token_probs([1, 2])
    model.fit(list(range(10)))
    with pytest.raises(ValueError, match="needs 2 context tokens, got 1"):
        model.next_token_probs([1])
    with pytest.raises(ValueError, match="token id 10 is outside"):
        model.cross_entropy([1, 2, 10])
    with pytest.raises(ValueError, match="need at least 3 tokens"):
        NGramLanguageModel(3, 10).fit([1, 2])


def test_backoff_uses_the_longest_seen_context():
    ids = [0, 1, 2, 0, 1, 2, 3]
    plain = NGramLanguageModel(3, 4, alpha=0.0).fit(ids)
    backed = NGramLanguageModel(3, 4, alpha=0.0, backoff=True).fit(ids)
    # Context (0, 1) was seen: both models agree (2 always follows it).
    assert backed.next_token_probs([0, 1]).tolist() == plain.next_token_probs([0, 1]).tolist() == [0, 0, 1, 0]
    # Context (3, 1) was never seen: the plain model is uniform, backoff uses the bigram P(. | 1).
    assert plain.next_token_probs([3, 1]).tolist() == [0.25] * 4
    assert backed.next_token_probs([3, 1]).tolist() == [0, 0, 1, 0]
    # Context (3, 3): neither (3, 3) nor 3 was seen as a context: the unigram distribution.
    assert backed.next_token_probs([3, 3]).tolist() == pytest.approx([2 / 7, 2 / 7, 2 / 7, 1 / 7])
    # A context shorter than n - 1 is fine with backoff: [1] alone predicts 2.
    assert backed.next_token_probs([1]).tolist() == [0, 0, 1, 0]
    assert backed.next_token_probs([]).tolist() == pytest.approx([2 / 7, 2 / 7, 2 / 7, 1 / 7])


def test_backoff_probabilities_sum_to_one_and_help_on_unseen_text(corpus):
    tok = CharTokenizer.from_text(corpus)
    ids = torch.tensor(tok.encode(corpus[:60_000]))
    train, val = ids[:50_000], ids[50_000:]
    plain = NGramLanguageModel(6, tok.vocab_size, alpha=0.01).fit(train)
    backed = NGramLanguageModel(6, tok.vocab_size, alpha=0.01, backoff=True).fit(train)
    for context in ("The as", "zzzzzz", "def f("):
        probs = backed.next_token_probs(tok.encode(context))
        assert probs.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert backed.cross_entropy(val) < plain.cross_entropy(val) - 0.3
