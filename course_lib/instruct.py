"""Instruction fine-tuning (chapter 11): prompt formats, the -100 collate, training, answering.

- :func:`format_prompt` writes an example in one of :data:`PROMPT_STYLES`: Alpaca's full
  preamble, a short ``### Instruction / ### Response`` template, or chat turns between role
  tokens (``<|user|>``, ``<|assistant|>``, added to the tokenizer and the model by
  :func:`add_special_tokens`);
- :func:`encode_instruction` tokenizes prompt + answer + end-of-text and remembers where the
  answer starts; :func:`collate` pads a batch with end-of-text, shifts the targets, and puts
  -100 (ignored by ``F.cross_entropy``) on every padding position after the first
  end-of-text — which stays a target, or the model never learns to stop — and, with
  ``mask_instruction=True``, on the prompt;
- :func:`train_instructions` is the fine-tuning recipe of chapter 10 with that loss, recording
  the validation loss on the answers only; :func:`answer` generates a greedy answer that stops
  at end-of-text, and :func:`answer_batch` answers many prompts at once, with the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .finetuning import FineTuneConfig, fine_tune
from .generation import decode_step, generate, generate_batch
from .model import GPT, tie_weights
from .runtime import evaluating, model_device
from .tasks import Instruction
from .tokenization import ENDOFTEXT, BPETokenizer
from .training import History

IGNORE_INDEX = -100
"""The target value ``F.cross_entropy`` skips (its default ``ignore_index``)."""

ALPACA_PREAMBLE = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request."
)
USER, ASSISTANT = "<|user|>", "<|assistant|>"
PROMPT_STYLES = ("alpaca", "short", "chat")


def check_instruction(example: Instruction, keys: Sequence[str] = ("instruction", "output")) -> None:
    """A clear error for an example that is not an instruction dict with string ``keys``."""
    if not isinstance(example, dict):
        raise TypeError(
            f"an instruction is a dict with the keys instruction, input, output; got {type(example).__name__}"
        )
    missing = [key for key in keys if key not in example]
    if missing:
        raise ValueError(f"the instruction {example!r:.80} has no {', '.join(map(repr, missing))} key")
    wrong = [key for key in (*keys, "input") if key in example and not isinstance(example[key], str)]
    if wrong:
        raise TypeError(f"the instruction's {', '.join(map(repr, wrong))} must be text (str)")


def format_prompt(example: Instruction, style: str = "short") -> str:
    """The prompt of ``example`` (everything the model reads before its answer).

    ``alpaca``: the preamble and ``### Instruction:`` / ``### Input:`` / ``### Response:``
    sections; ``short``: the same sections without the preamble; ``chat``: the user's turn
    between role tokens, then the assistant's role token. An empty input leaves its section out.
    """
    check_instruction(example, ("instruction",))
    instruction, given = example["instruction"].strip(), example.get("input", "").strip()
    if style == "chat":
        return f"{USER}{instruction}" + (f"\n\n{given}" if given else "") + ASSISTANT
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; choose one of {', '.join(PROMPT_STYLES)}")
    text = (ALPACA_PREAMBLE + "\n\n" if style == "alpaca" else "") + f"### Instruction:\n{instruction}\n\n"
    if given:
        text += f"### Input:\n{given}\n\n"
    return text + "### Response:\n"


def encode_instruction(example: Instruction, tokenizer, style: str = "short") -> tuple[list[int], int]:
    """``(ids, prompt_length)``: prompt + answer + end-of-text as token ids, and how many of
    them are the prompt (the answer starts at position ``prompt_length``)."""
    check_instruction(example)
    prompt = tokenizer.encode(format_prompt(example, style), allowed_special="all")
    answer = tokenizer.encode(example["output"].strip())
    if not answer:
        raise ValueError(f"the example {example['instruction'][:60]!r} has an empty output: nothing to learn")
    return prompt + answer + [tokenizer.special_tokens[ENDOFTEXT]], len(prompt)


def collate(
    batch: Sequence[tuple[list[int], int]],
    pad_id: int,
    max_length: int | None = None,
    mask_instruction: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)``, both (B, T), from encoded examples (see :func:`encode_instruction`).

    Each row is padded with ``pad_id`` (end-of-text) to the longest of the batch plus one;
    inputs are tokens 0..T-1, targets tokens 1..T. Targets after the example's own last token
    (its closing end-of-text) become -100; with ``mask_instruction`` the targets that are still
    prompt tokens become -100 too. ``max_length`` (the context) truncates each row to
    ``max_length + 1`` tokens first. A batch left with no target at all is an error: its mean
    loss would be 0/0 = NaN.
    """
    if len(batch) == 0:
        raise ValueError("collate needs at least one encoded example, got an empty batch")
    rows = [(list(ids if max_length is None else ids[: max_length + 1]), n) for ids, n in batch]
    T = max(len(ids) for ids, _ in rows) - 1
    if T < 1:
        raise ValueError("every example of the batch has a single token: there is no next token to predict")
    inputs = torch.full((len(rows), T), pad_id, dtype=torch.long)  # (B, T)
    targets = torch.full((len(rows), T), IGNORE_INDEX, dtype=torch.long)  # (B, T)
    for k, (ids, prompt_length) in enumerate(rows):
        row = torch.tensor(ids, dtype=torch.long)
        inputs[k, : len(ids) - 1] = row[:-1]
        targets[k, : len(ids) - 1] = row[1:]  # target t is token t + 1; the closing end-of-text stays a target
        if mask_instruction:
            targets[k, : prompt_length - 1] = IGNORE_INDEX  # targets 0..n-2 are prompt tokens 1..n-1
    if bool((targets == IGNORE_INDEX).all()):
        raise ValueError(
            "every target of this batch is -100 (ignored), so the loss would be NaN: are the answers empty, "
            "or cut off by max_length?"
        )
    return inputs, targets


def instruction_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the targets that are not -100."""
    logits = model(inputs)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX)


@torch.no_grad()
def answer_loss(model: GPT, encoded: Sequence[tuple[list[int], int]], pad_id: int, batch_size: int = 32) -> float:
    """Mean loss over the answer tokens only (prompts masked), in eval mode: how well the model
    predicts the answers, whatever it learned of the prompts."""
    device = model_device(model)
    total, count = 0.0, 0
    with evaluating(model):
        for start in range(0, len(encoded), batch_size):
            inputs, targets = collate(encoded[start : start + batch_size], pad_id, model.config.context_length, True)
            n = int((targets != IGNORE_INDEX).sum())
            total += instruction_loss(model, inputs.to(device), targets.to(device)).item() * n
            count += n
    return total / count


def train_instructions(
    model: GPT,
    train: Sequence[tuple[list[int], int]],
    val: Sequence[tuple[list[int], int]],
    pad_id: int,
    config: FineTuneConfig,
    mask_instruction: bool = False,
    progress: bool | None = None,
    stop: Callable[[History], bool] | None = None,
) -> History:
    """Fine-tune ``model`` on encoded instructions; the history's ``val_loss`` is measured on the
    validation answers only (see :func:`answer_loss`). ``stop(history)``, called after each
    evaluation is recorded, ends training early when it returns True."""
    if not train or not val:
        raise ValueError("train_instructions needs training and validation examples")
    device = model_device(model)
    history = History()

    def batch_loss(chosen: Sequence[int]) -> torch.Tensor:
        inputs, targets = collate([train[i] for i in chosen], pad_id, model.config.context_length, mask_instruction)
        return instruction_loss(model, inputs.to(device), targets.to(device))

    def record(step: int) -> bool:
        history.steps.append(step)
        history.val_loss.append(answer_loss(model, val, pad_id))
        return stop is not None and stop(history)

    history.seconds = fine_tune(model, len(train), batch_loss, config, record, progress)
    return history


def answer(model: GPT, tokenizer, prompt: str, max_new_tokens: int = 48, eos_id: int | None = None) -> tuple[str, bool]:
    """``(text, stopped)``: the greedy continuation of ``prompt`` up to end-of-text (``eos_id``,
    default the tokenizer's ``<|endoftext|>``), and whether the model stopped by itself
    within ``max_new_tokens``. A prompt longer than the context keeps its last tokens; once the
    answer fills the context the window slides (as in training, prompt + answer should fit)."""
    eos_id = tokenizer.special_tokens[ENDOFTEXT] if eos_id is None else eos_id
    ids = tokenizer.encode(prompt, allowed_special="all")
    prompt_ids = torch.tensor([ids[-(model.config.context_length - 1) :]])  # (1, T): room for one new token
    new = generate(model, prompt_ids, max_new_tokens, greedy=True, eos_id=eos_id)[0, prompt_ids.shape[1] :].tolist()
    stopped = eos_id in new
    return tokenizer.decode(new[: new.index(eos_id)] if stopped else new).strip(), stopped


def answer_batch(
    model: GPT,
    tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = 48,
    eos_id: int | None = None,
    batch_size: int = 16,
    step=decode_step,
) -> list[tuple[str, bool]]:
    """``[answer(model, tokenizer, p, max_new_tokens, eos_id) for p in prompts]``, computed
    ``batch_size`` prompts at a time by :func:`~course_lib.generation.generate_batch` (the same
    answers, tested). Prompts of similar lengths are batched together, so little is padding."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    eos_id = tokenizer.special_tokens[ENDOFTEXT] if eos_id is None else eos_id
    keep = model.config.context_length - 1  # as answer(): room for one new token
    encoded = [tokenizer.encode(p, allowed_special="all")[-keep:] for p in prompts]
    order = sorted(range(len(encoded)), key=lambda k: len(encoded[k]))
    results: list[tuple[str, bool]] = [("", False)] * len(encoded)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        new = generate_batch(model, [encoded[k] for k in chosen], max_new_tokens, greedy=True, eos_id=eos_id, step=step)
        for k, ids in zip(chosen, new):
            stopped = bool(ids) and ids[-1] == eos_id
            results[k] = (tokenizer.decode(ids[:-1] if stopped else ids).strip(), stopped)
    return results


def add_special_tokens(model: GPT, tokenizer, names: Sequence[str]):
    """``(model, tokenizer)`` with new special tokens (e.g. chat role markers) at new ids after
    the vocabulary; the embedding (and the tied LM head) grows by one row each.

    A new row starts at the mean of the existing embeddings, not at random: the logits of the old
    tokens are unchanged, and the new token's logit starts at the mean logit, so it takes only a
    small share of the probability (the distribution over the old tokens barely moves), where a
    random row could give it any share at all (Hewitt, 2021).
    """
    taken = [n for n in names if n in tokenizer.special_tokens]
    if taken:
        raise ValueError(f"the tokenizer already has the special tokens {taken}")
    old, n = model.config.vocab_size, len(names)
    special = dict(tokenizer.special_tokens) | {name: old + k for k, name in enumerate(names)}
    grown_tokenizer = BPETokenizer(tokenizer.vocab, tokenizer.merges, special, tokenizer.pattern)

    def with_mean_rows(weight: torch.Tensor) -> torch.Tensor:
        return torch.cat([weight, weight.mean(dim=0, keepdim=True).expand(n, -1)])  # (V + n, C)

    with torch.no_grad():
        wte = model.transformer.wte.weight.detach()
        model.transformer.wte = nn.Embedding.from_pretrained(with_mean_rows(wte), freeze=False)
        head = nn.Linear(model.config.d_model, old + n, bias=False).to(wte.device, wte.dtype)
        head.weight.copy_(with_mean_rows(model.lm_head.weight.detach()))
        model.lm_head = head
    model.config.vocab_size = old + n
    if model.config.tie_weights:
        tie_weights(model)
    return model, grown_tokenizer
