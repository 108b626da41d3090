"""Classifying with a GPT: padding, pooling at the last real token, freezing, training."""

import pytest
import torch

from course_lib.classification import (
    GPTClassifier,
    confusion_matrix,
    encode_examples,
    evaluate,
    freeze,
    last_real_token,
    majority_baseline,
    pad_batch,
    pad_id_of,
    train_classifier,
)
from course_lib.finetuning import FineTuneConfig
from course_lib.tokenization import ENDOFTEXT, BPETokenizer


@pytest.fixture
def classifier(tiny_gpt):
    """A three-class classifier on a small GPT with a vocabulary of 300."""

    def make(pooling: str = "last_real", seed: int = 0) -> GPTClassifier:
        return GPTClassifier(tiny_gpt(seed, vocab_size=300), n_classes=3, pooling=pooling).eval()

    return make


def test_pad_batch_pads_to_the_longest_and_keeps_the_start():
    ids, lengths = pad_batch([[5, 6], [7, 8, 9, 10], [11]], pad_id=0, max_length=16)
    assert ids.tolist() == [[5, 6, 0, 0], [7, 8, 9, 10], [11, 0, 0, 0]] and lengths.tolist() == [2, 4, 1]
    ids, lengths = pad_batch([list(range(1, 21))], pad_id=0, max_length=16)
    assert ids.tolist() == [list(range(1, 17))] and lengths.tolist() == [16]  # the start of a long text
    with pytest.raises(ValueError, match="text 1 has 20 tokens, more than the context of 16; pass truncate=True"):
        pad_batch([[1], list(range(20))], pad_id=0, max_length=16, truncate=False)
    with pytest.raises(ValueError, match="text 0 of the batch is empty"):
        pad_batch([[]], pad_id=0, max_length=16)


def test_the_last_real_token_ignores_padding_and_position_minus_one_does_not(classifier):
    """The most reported pitfall: a text's prediction must not depend on its batch."""
    text, longer = [3, 14, 15, 92, 65], [2, 71, 82, 81, 82, 84, 59, 4, 5]
    for pooling, invariant in (("last_real", True), ("last", False)):
        model = classifier(pooling)
        alone = model(*pad_batch([text], 299, 16))[0]
        ids, lengths = pad_batch([text, longer], 299, 16)  # the text now carries 4 padding tokens
        in_batch = model(ids, lengths)[0]
        assert torch.allclose(alone, in_batch, atol=1e-5) == invariant, pooling


def test_last_real_token_gathers_each_rows_last_position():
    features = torch.randn(3, 5, 4)
    lengths = torch.tensor([5, 1, 3])
    expected = torch.stack([features[0, 4], features[1, 0], features[2, 2]])
    assert torch.equal(last_real_token(features, lengths), expected)


def test_freezing_counts_what_trains(classifier):
    model = classifier()
    head = 32 * 3 + 3
    assert freeze(model, "head") == (head, sum(p.numel() for p in model.parameters()))
    block = sum(p.numel() for p in model.gpt.transformer.h[-1].parameters())
    norm = sum(p.numel() for p in model.gpt.transformer.ln_f.parameters())
    assert freeze(model, "last_block")[0] == head + block + norm
    assert freeze(model, "all")[0] == sum(p.numel() for p in model.parameters())
    with pytest.raises(ValueError, match="unknown choice 'middle'"):
        freeze(model, "middle")


def test_bad_examples_are_refused(tiny_gpt):
    tok = BPETokenizer.from_merges([], special_tokens={ENDOFTEXT: 256})
    assert pad_id_of(tok) == 256
    with pytest.raises(ValueError, match="example 1 has label 3; labels must be integers 0..2"):
        encode_examples([("fine", 0), ("bad", 3)], tok, 3)
    with pytest.raises(ValueError, match="example 0 is an empty text"):
        encode_examples([("", 0)], tok, 3)
    with pytest.raises(ValueError, match="no '<|endoftext|>' token to pad with"):
        pad_id_of(BPETokenizer.from_merges([]))
    with pytest.raises(ValueError, match="at least 2 classes"):
        GPTClassifier(tiny_gpt(vocab_size=300), 1)


def test_training_learns_a_task_that_needs_the_whole_text(classifier):
    """Class = which of three marker tokens appears, anywhere in a random text."""
    generator = torch.Generator().manual_seed(0)

    def examples(n):
        out = []
        for _ in range(n):
            label = int(torch.randint(0, 3, (1,), generator=generator))
            length = int(torch.randint(3, 12, (1,), generator=generator))
            ids = torch.randint(10, 200, (length,), generator=generator).tolist()
            ids[int(torch.randint(0, length, (1,), generator=generator))] = (
                label + 1
            )  # the marker: 1, 2 or 3 (38 batches of 16 an epoch)
            out.append((ids, label))
        return out

    train, val = examples(600), examples(150)
    model = classifier()
    freeze(model, "all")
    history = train_classifier(model, train, val, pad_id=299, config=FineTuneConfig(epochs=4, lr=3e-3, eval_every=40),
                               progress=False)  # fmt: skip
    assert history.val_accuracy[-1] > 0.9 and history.val_accuracy[-1] > history.val_accuracy[0]
    assert history.steps[-1] == 4 * 38 and len(history.train_loss) == len(history.steps)
    loss, accuracy, predictions = evaluate(model, val, pad_id=299)
    assert accuracy == history.val_accuracy[-1] and predictions.shape == (150,)


def test_baseline_and_confusion_matrix():
    assert majority_baseline([0, 1, 1, 2], [1, 1, 0, 2, 1]) == 3 / 5
    matrix = confusion_matrix([0, 1, 1, 2], [0, 1, 2, 2], 3)
    assert matrix.tolist() == [[1, 0, 0], [0, 1, 0], [0, 1, 1]]  # rows: truth, columns: prediction


def test_bad_batches_and_lengths_get_clear_errors():
    with pytest.raises(ValueError, match="empty batch"):
        pad_batch([], pad_id=0, max_length=8)
    features = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="between 1 and the row's 3 positions.*position -1"):
        last_real_token(features, torch.tensor([0, 2]))  # would silently read the last padding token
    with pytest.raises(ValueError, match="between 1 and the row's 3 positions"):
        last_real_token(features, torch.tensor([4, 2]))  # would be a raw IndexError
    with pytest.raises(ValueError, match="one length per row"):
        last_real_token(features, torch.tensor([1, 2, 3]))
