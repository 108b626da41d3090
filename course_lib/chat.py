"""Talking to a model: a conversation, rendered by a chat template, answered as it is written.

A chat model reads the whole conversation at every turn, laid out the way it was trained on:
role markers around each message, then the opening of the assistant's turn. :class:`Chat`
keeps the messages, renders them with

- the model's own template (SmolLM2's Jinja template from its GGUF file, via
  :func:`~course_lib.pretrained.apply_chat_template`), or
- one of the course's prompt styles of chapter 11 (:func:`course_chat_prompt`): the role
  tokens, ``<|user|>question<|assistant|>answer<|endoftext|><|user|>...``, or the
  ``### Instruction`` / ``### Response`` sections the tuned model of notebook 11 learned,

and streams the reply piece by piece. Its :class:`~course_lib.generation.Session` keeps the KV
cache between turns: a new turn runs only the tokens the conversation gained (the longest
common prefix with what the cache holds is kept). :meth:`Chat.stop` ends a reply early (from
another thread, as the widget's stop button does); :attr:`Chat.tokens_per_second` measures the
last reply. The view is :class:`course_lib.widgets.ChatWidget`; everything here runs headless.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch

from .generation import Session
from .instruct import ASSISTANT, PROMPT_STYLES, USER, format_prompt
from .model import GPT
from .pretrained import apply_chat_template
from .tokenization import ENDOFTEXT
from .tools import Reply, ToolCall, ToolMarkers

Message = dict[str, str]


def course_chat_prompt(messages: list[Message], style: str = "chat") -> str:
    """A whole conversation in one of chapter 11's prompt styles: each user turn as
    :func:`~course_lib.instruct.format_prompt` writes an instruction (``chat``: between
    ``<|user|>`` and ``<|assistant|>``; ``short``: ``### Instruction:`` ... ``### Response:``),
    each answer followed by ``<|endoftext|>``, as in training; the last user turn leaves the
    answer open. One user turn gives exactly ``format_prompt``'s prompt. No system turn."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; choose one of {', '.join(PROMPT_STYLES)}")
    parts = []
    for k, message in enumerate(messages):
        role, content = message["role"], message["content"]
        if role == "user":
            parts.append(format_prompt({"instruction": content}, style))
        elif role == "assistant":
            if k == 0 or messages[k - 1]["role"] != "user":
                raise ValueError(f"message {k}: an assistant turn must answer a user turn")
            parts.append(f"{content}{ENDOFTEXT}")
        else:
            raise ValueError(f"message {k}: the course's formats have user and assistant turns only, got {role!r}")
    return "".join(parts)


class Chat:
    """A conversation with ``model``.

    ``template``: the model's Jinja chat template (``notes["chat_template"]`` of
    :func:`~course_lib.pretrained.load_smollm2`), or one of chapter 11's prompt styles
    (:func:`course_chat_prompt`): ``"chat"`` (the role tokens, the default) or ``"short"``
    (``### Instruction`` / ``### Response``, what notebook 11's tuned model learned).
    ``eos_id`` ends a reply (default: the tokenizer's ``<|endoftext|>``). ``system`` starts the
    conversation with a system message (templates that have one). ``temperature`` 0 is greedy.
    ``tool`` (e.g. :func:`~course_lib.tools.calculator`) is run when the model closes a call.
    """

    def __init__(
        self,
        model: GPT,
        tokenizer,
        template: str | None = None,
        eos_id: int | None = None,
        system: str | None = None,
        max_new_tokens: int = 200,
        temperature: float = 0.0,
        seed: int | None = None,
        tool: Callable[[str], str] | None = None,
        markers: ToolMarkers | None = None,
    ):
        self.model, self.tokenizer = model, tokenizer
        if eos_id is None:
            if ENDOFTEXT not in getattr(tokenizer, "special_tokens", {}):
                raise ValueError(f"the tokenizer has no {ENDOFTEXT}: pass the model's end-of-turn id as eos_id")
            eos_id = tokenizer.special_tokens[ENDOFTEXT]
        self.template = template = "chat" if template is None else template
        if template == "chat" and not {USER, ASSISTANT} <= set(getattr(tokenizer, "special_tokens", {})):
            raise ValueError(
                f"the course's chat format needs the role tokens {USER} and {ASSISTANT} in the tokenizer "
                "(instruct.add_special_tokens adds them, chapter 11); a model tuned on ### Instruction prompts "
                "takes template='short'; a chat model, its own chat template"
            )
        self.eos_id, self.max_new_tokens, self.temperature = eos_id, max_new_tokens, temperature
        self.tool, self.markers = tool, markers or ToolMarkers()
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self.messages: list[Message] = [{"role": "system", "content": system}] if system else []
        self.render()  # a template that cannot render these messages says so now
        self.session = Session(model)
        self._stop = False
        self.last_tokens, self.last_seconds, self.last_end = 0, 0.0, ""

    def render(self) -> str:
        """The conversation as the model reads it, ending with the assistant's turn opened."""
        if self.template in PROMPT_STYLES:
            return course_chat_prompt(self.messages, self.template)
        return apply_chat_template(self.template, self.messages)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, allowed_special="all")

    def send(self, text: str) -> Iterator[str]:
        """Add the user's message and yield the reply's text as it is written (a tool's result
        too). When the iteration ends, also early, the reply joins the messages."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the message is empty: say something")
        self._stop = False
        self.messages.append({"role": "user", "content": text})
        ids = self._encode(self.render())
        common = 0
        for a, b in zip(ids, self.session.ids):  # the conversation so far is cached: keep it
            if a != b:
                break
            common += 1
        self.session.truncate(min(common, len(ids) - 1))  # at least the last token runs: its logits
        self.session.extend(ids[len(self.session.ids) :])
        sampling = {"greedy": True} if self.temperature <= 0 else {"temperature": self.temperature}
        if self.generator is not None:
            sampling["generator"] = self.generator
        reply = Reply(
            self.session,
            self.tokenizer,
            self.max_new_tokens,
            self.tool,
            self.markers,
            self.eos_id,
            should_stop=lambda: self._stop,
            sampling=sampling,
        )
        start = time.perf_counter()
        try:
            for piece in reply:
                yield piece.inserted if isinstance(piece, ToolCall) else piece
        finally:
            self.last_seconds = time.perf_counter() - start
            self.last_tokens = reply.tokens
            full = reply.tokens >= self.max_new_tokens
            self.last_end = "end of turn" if reply.stopped else "token limit" if full else "stopped"
            self.messages.append({"role": "assistant", "content": reply.text})

    def say(self, text: str) -> str:
        """The whole reply to ``text`` at once."""
        return "".join(self.send(text))

    def stop(self) -> None:
        """End the reply being written after the current token (safe from another thread)."""
        self._stop = True

    def reset(self) -> None:
        """Forget the conversation (a system message stays)."""
        self.messages = [m for m in self.messages if m["role"] == "system"]

    @property
    def tokens_per_second(self) -> float:
        """Of the last reply: tokens sampled / seconds, prompt processing included."""
        return self.last_tokens / self.last_seconds if self.last_seconds > 0 else 0.0
