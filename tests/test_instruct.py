"""Instruction fine-tuning: prompt formats, the -100 collate, the loss, training, special tokens."""

import pytest
import torch
import torch.nn.functional as F

from course_lib.finetuning import FineTuneConfig
from course_lib.instruct import (
    ALPACA_PREAMBLE,
    ASSISTANT,
    IGNORE_INDEX,
    USER,
    add_special_tokens,
    answer,
    answer_batch,
    answer_loss,
    collate,
    encode_instruction,
    format_prompt,
    instruction_loss,
    train_instructions,
)
from course_lib.model import GPT, GPTConfig
from course_lib.pretrained import load_pretrained

PAD = 0  # the end-of-text id in these hand-made batches

EXAMPLE = {"instruction": "Name the area.", "input": "Return the sine of x.", "output": "numbers and maths"}

# -- prompt formats --------------------------------------------------------------------------------


def test_prompt_formats():
    assert format_prompt(EXAMPLE, "short") == (
        "### Instruction:\nName the area.\n\n### Input:\nReturn the sine of x.\n\n### Response:\n"
    )
    assert format_prompt(EXAMPLE | {"input": ""}, "short") == "### Instruction:\nName the area.\n\n### Response:\n"
    assert format_prompt(EXAMPLE, "alpaca").startswith(ALPACA_PREAMBLE + "\n\n### Instruction:")
    assert format_prompt(EXAMPLE, "chat") == f"{USER}Name the area.\n\nReturn the sine of x.{ASSISTANT}"
    with pytest.raises(ValueError, match="unknown prompt style 'llama'"):
        format_prompt(EXAMPLE, "llama")


# -- the collate function, on hand-made batches ------------------------------------------------------


def test_collate_pads_shifts_and_ignores_padding_after_the_first_end_of_text():
    batch = [([5, 6, 7, 8, PAD], 2), ([9, 10, PAD], 1)]  # (prompt + answer + end-of-text, prompt length)
    inputs, targets = collate(batch, PAD)
    assert inputs.tolist() == [[5, 6, 7, 8], [9, 10, PAD, PAD]]
    assert targets.tolist() == [[6, 7, 8, PAD], [10, PAD, -100, -100]]  # the closing end-of-text stays a target


def test_collate_masks_the_instruction_without_an_off_by_one():
    batch = [([5, 6, 7, 8, PAD], 2), ([9, 10, PAD], 1)]
    inputs, targets = collate(batch, PAD, mask_instruction=True)
    # row 0: prompt 5 6, answer 7 8: the first target kept is 7 (predicted from 6)
    assert targets.tolist() == [[-100, 7, 8, PAD], [10, PAD, -100, -100]]


def test_collate_truncates_to_the_context_and_refuses_a_batch_without_targets():
    inputs, targets = collate([([1, 2, 3, 4, 5, 6, PAD], 2)], PAD, max_length=4)
    assert inputs.tolist() == [[1, 2, 3, 4]] and targets.tolist() == [[2, 3, 4, 5]]
    with pytest.raises(ValueError, match="every target of this batch is -100"):
        collate([([1, 2, 3, 4, 5, 6, PAD], 6)], PAD, max_length=4, mask_instruction=True)
    with pytest.raises(ValueError, match="single token"):
        collate([([PAD], 0)], PAD)


def test_the_loss_ignores_exactly_the_minus_100_targets():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=12, context_length=8, n_layers=1, n_heads=2, d_model=8))
    inputs, targets = collate([([5, 6, 7, 8, PAD], 2), ([9, 10, PAD], 1)], PAD)
    logits = model(inputs)
    kept = targets != IGNORE_INDEX
    by_hand = F.cross_entropy(logits[kept], targets[kept])
    assert torch.allclose(instruction_loss(model, inputs, targets), by_hand)


# -- with the course model -------------------------------------------------------------------------------


def test_encoding_ends_with_end_of_text_and_records_the_prompt(course):
    _, tokenizer, _ = course
    ids, n = encode_instruction(EXAMPLE, tokenizer)
    eot = tokenizer.special_tokens["<|endoftext|>"]
    assert ids[-1] == eot and ids[:n] == tokenizer.encode(format_prompt(EXAMPLE))
    assert tokenizer.decode(ids[n:-1]) == "numbers and maths"
    with pytest.raises(ValueError, match="empty output"):
        encode_instruction(EXAMPLE | {"output": " "}, tokenizer)


def test_a_short_training_lowers_the_answer_loss_and_answers_stop(course, instructions):
    _, tokenizer, _ = course
    model = load_pretrained()[0]
    eot = tokenizer.special_tokens["<|endoftext|>"]
    fits = lambda pair: len(pair[0]) <= 129  # noqa: E731
    train = [p for p in (encode_instruction(e, tokenizer) for e in instructions.train[:240]) if fits(p)]
    val = [p for p in (encode_instruction(e, tokenizer) for e in instructions.val[:30]) if fits(p)]
    before = answer_loss(model, val, eot)
    torch.manual_seed(0)
    config = FineTuneConfig(epochs=1.5, lr=3e-3, eval_every=10)
    history = train_instructions(model, train, val, eot, config, mask_instruction=True)
    assert history.val_loss[-1] < before - 1.0 and len(history.steps) >= 2
    text, stopped = answer(model, tokenizer, format_prompt(instructions.test[0]), max_new_tokens=40)
    assert stopped and "###" not in text


def test_training_stops_at_the_first_evaluation_that_meets_the_criterion(tiny_gpt):
    model = tiny_gpt(0)
    examples = [([1 + (k + j) % 30 for j in range(8)] + [PAD], 3) for k in range(64)]
    seen = []

    def stop(history):  # called after each evaluation, with what it recorded
        seen.append(list(history.steps))
        return len(history.steps) == 3

    config = FineTuneConfig(epochs=10, batch_size=8, eval_every=5)  # 80 steps planned
    history = train_instructions(model, examples, examples[:8], PAD, config, stop=stop)
    assert history.steps == [5, 10, 15] and len(history.val_loss) == 3
    assert seen == [[5], [5, 10], [5, 10, 15]] and not model.training


def test_answer_batch_gives_the_answers_of_answer(course, instructions, one_thread):
    model, tokenizer, _ = course
    prompts = [format_prompt(e) for e in instructions.test[:5]] + ["x", "def " * 140]  # the last: past the context
    eos = tokenizer.encode(" the")[0]  # a common token as end-of-text: some answers stop, at different steps
    one_by_one = [answer(model, tokenizer, p, max_new_tokens=20, eos_id=eos) for p in prompts]
    assert answer_batch(model, tokenizer, prompts, max_new_tokens=20, eos_id=eos, batch_size=3) == one_by_one
    assert {stopped for _, stopped in one_by_one} == {True, False}
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        answer_batch(model, tokenizer, prompts, batch_size=0)


def test_new_special_tokens_leave_the_old_outputs_unchanged(course):
    model, tokenizer, _ = load_pretrained()
    ids = torch.tensor([tokenizer.encode("Return the sine of x.")])
    with torch.no_grad():
        before = model(ids)
    grown, grown_tokenizer = add_special_tokens(model, tokenizer, [USER, ASSISTANT])
    V = before.shape[-1]
    assert grown_tokenizer.special_tokens[USER] == V and grown_tokenizer.special_tokens[ASSISTANT] == V + 1
    with torch.no_grad():
        after = grown(ids)
    assert after.shape[-1] == V + 2 and torch.allclose(after[..., :V], before, atol=1e-6)
    assert torch.allclose(after[..., V], before.mean(dim=-1), atol=1e-4)  # a new token starts at the mean logit
    assert grown.lm_head.weight is grown.transformer.wte.weight  # still tied
    assert grown_tokenizer.encode(f"{USER}hi{ASSISTANT}", allowed_special="all")[0] == V
    with pytest.raises(ValueError, match="already has the special tokens"):
        add_special_tokens(grown, grown_tokenizer, [USER])


def test_malformed_instructions_and_empty_batches_get_clear_errors():
    with pytest.raises(ValueError, match="has no 'instruction' key"):
        format_prompt({"input": "x", "output": "y"})
    with pytest.raises(ValueError, match="has no 'output' key"):
        encode_instruction({"instruction": "Name it."}, None)
    with pytest.raises(TypeError, match="a dict with the keys instruction, input, output; got str"):
        format_prompt("What does len() do?")
    with pytest.raises(TypeError, match="'input' must be text"):
        format_prompt({"instruction": "Name it.", "input": 3, "output": "y"})
    with pytest.raises(ValueError, match="empty batch"):
        collate([], pad_id=PAD)
