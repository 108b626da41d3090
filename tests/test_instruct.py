"""Instruction fine-tuning: prompt formats, the -100 collate, training, evaluation helpers."""

import pytest
import torch
import torch.nn.functional as F

from course_lib.evaluation import areas_named, exact_match, has_expected_form, option_scores
from course_lib.finetuning import FineTuneConfig
from course_lib.instruct import (
    ALPACA_PREAMBLE,
    ASSISTANT,
    IGNORE_INDEX,
    USER,
    add_special_tokens,
    answer,
    answer_loss,
    collate,
    encode_instruction,
    format_prompt,
    instruction_loss,
    train_instructions,
)
from course_lib.model import GPT, GPTConfig
from course_lib.pretrained import load_pretrained
from course_lib.tasks import (
    AREA_INSTRUCTION,
    DOCSTRING_AREAS,
    docs_instructions,
    docs_multiple_choice,
    docstring_areas,
    split_of,
)

PAD = 0  # the end-of-text id in these hand-made batches


@pytest.fixture(scope="module")
def instructions():
    return docs_instructions()


@pytest.fixture(scope="module")
def course():
    return load_pretrained()


# -- data -----------------------------------------------------------------------------------------


def test_the_docs_assistant_set_has_every_kind_in_every_split(instructions):
    kinds = instructions.kinds()
    assert set(kinds) == {"describe", "name", "area", "explain"}
    assert all(n > 0 for counts in kinds.values() for n in counts)
    for split in ("train", "val", "test"):
        for e in getattr(instructions, split):
            assert set(e) == {"instruction", "input", "output", "kind"} and e["output"].strip()
            fact = e["input"] if e["kind"] in ("name", "area") else e["output"]
            if e["kind"] != "explain":
                assert split_of(fact) == split  # held out by fact: a test sentence is never trained on
            if e["kind"] == "explain":
                assert "::=" not in e["output"]  # no grammar lines


def test_area_instructions_agree_with_chapter_10(instructions):
    areas = docstring_areas()
    labelled = {text: areas.label_names[y] for text, y in areas.train + areas.val + areas.test}
    for e in instructions.train + instructions.test:
        if e["kind"] == "area":
            assert e["instruction"] == AREA_INSTRUCTION and labelled[e["input"]] == e["output"]


def test_multiple_choice_questions_hold_their_answer_once(instructions):
    questions = docs_multiple_choice(instructions.test, n_options=4)
    describe = {e["instruction"]: e["output"] for e in instructions.test if e["kind"] == "describe"}
    assert len(questions) == len(describe)
    for q in questions:
        assert len(q["options"]) == len(set(q["options"])) == 4
        assert q["options"][q["answer"]] == describe[q["question"]]
    assert docs_multiple_choice(instructions.test) == questions  # deterministic
    assert len({q["answer"] for q in questions}) == 4  # the right answer is not always in one place


# -- prompt formats --------------------------------------------------------------------------------

EXAMPLE = {"instruction": "Name the area.", "input": "Return the sine of x.", "output": "numbers and maths"}


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


# -- evaluation ---------------------------------------------------------------------------------------------


def test_expected_forms():
    assert has_expected_form({"kind": "describe"}, "Return the square root of x.")
    assert not has_expected_form({"kind": "describe"}, "Return the square root of")
    assert has_expected_form({"kind": "name"}, "`math.sqrt()`") and has_expected_form({"kind": "name"}, "`os.Path`")
    assert not has_expected_form({"kind": "name"}, "math.sqrt()") and not has_expected_form({"kind": "name"}, "`a b`")
    assert all(has_expected_form({"kind": "area"}, area) for area in DOCSTRING_AREAS)
    assert not has_expected_form({"kind": "area"}, "maths")
    assert exact_match(" text\n", "text") and not exact_match("Text", "text")
    with pytest.raises(ValueError, match="no expected form"):
        has_expected_form({"kind": "poem"}, "x")
    assert areas_named("This is about Networking.") == ["networking"]
    assert areas_named("Text, or dates and time?") == ["text", "dates and time"] and areas_named("no idea") == []


def test_option_scores_are_log_probabilities_of_the_options():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=12, context_length=16, n_layers=1, n_heads=2, d_model=8)).eval()
    prompt, options = [1, 2, 3], [[4], [5, 6]]
    scores = option_scores(model, prompt, options, per_token=False)
    with torch.no_grad():
        logp = F.log_softmax(model(torch.tensor([[1, 2, 3, 5, 6]])), dim=-1)[0]
    assert scores[1] == pytest.approx((logp[2, 5] + logp[3, 6]).item(), abs=1e-5)
    assert option_scores(model, prompt, options)[1] == pytest.approx(scores[1] / 2, abs=1e-6)
    assert sum(torch.tensor(option_scores(model, prompt, [[t] for t in range(12)], per_token=False)).exp()) == (
        pytest.approx(1.0, abs=1e-5)
    )  # one-token options: a probability distribution over the vocabulary
    with pytest.raises(ValueError, match="at least one token"):
        option_scores(model, prompt, [[4], []])
