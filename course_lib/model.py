"""The GPT model: embeddings, a stack of transformer blocks, a final norm, an LM head.

One :class:`GPTConfig` drives every variant the course compares: positional scheme (none /
learned / sinusoidal / RoPE / ALiBi), normalisation (LayerNorm / RMSNorm), feed-forward (GELU
MLP / SwiGLU), biases, weight tying, pre- or post-norm, dropout. ``GPTConfig.gpt2()`` is
GPT-2: its parameter names and shapes map one-to-one onto Hugging Face's (Conv1D weights are
stored transposed there), and :func:`course_lib.pretrained.load_gpt2_state_dict` fills the
model from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn as nn

from .attention import KVCache, LayerKV, MultiHeadAttention, StaticKVCache, StaticLayerKV, StaticStep
from .layers import FeedForward, LayerNorm, RMSNorm, SwiGLU
from .positional import LearnedPositionalEmbedding, sinusoidal_at, sinusoidal_encoding

POSITIONAL = ("none", "learned", "sinusoidal", "rope", "alibi")
NORMS = ("layernorm", "rmsnorm")
FFNS = ("mlp", "swiglu")

GPT2_SIZES = {  # name: (n_layers, n_heads, d_model)
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
}


@dataclass
class GPTConfig:
    vocab_size: int = 50257
    context_length: int = 1024
    n_layers: int = 12
    n_heads: int = 12
    d_model: int = 768
    n_kv_heads: int | None = None  # key/value heads; fewer than n_heads is grouped-query attention (LLaMA 2+)
    positional: str = "learned"
    norm: str = "layernorm"
    ffn: str = "mlp"
    activation: str = "gelu_tanh"  # for ffn="mlp"; GPT-2 uses GELU's tanh approximation
    ffn_hidden: int | None = None  # default: 4 * d_model (mlp) or 8/3 * d_model (swiglu)
    bias: bool = True
    tie_weights: bool = True
    dropout: float = 0.0
    pre_norm: bool = True
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    fast: bool = True  # PyTorch's fused kernels for attention, norms and activations

    def __post_init__(self) -> None:
        for name, value, allowed in [
            ("positional", self.positional, POSITIONAL),
            ("norm", self.norm, NORMS),
            ("ffn", self.ffn, FFNS),
        ]:
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise ValueError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}: in grouped-query "
                "attention each key/value head serves the same number of query heads"
            )
        if self.positional == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"RoPE rotates pairs of dimensions, so the head dimension must be even; "
                f"d_model / n_heads = {self.d_model} / {self.n_heads} = {self.d_model // self.n_heads}"
            )
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal encodings need an even d_model, got {self.d_model}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def hidden(self) -> int:
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        return 4 * self.d_model if self.ffn == "mlp" else 4 * self.d_model * 2 // 3

    @classmethod
    def gpt2(cls, name: str = "gpt2", **overrides) -> GPTConfig:
        """GPT-2 (small by default): learned positions, LayerNorm, GELU (tanh), biases, tied head."""
        if name not in GPT2_SIZES:
            raise ValueError(f"unknown GPT-2 size {name!r}; choose one of {', '.join(GPT2_SIZES)}")
        n_layers, n_heads, d_model = GPT2_SIZES[name]
        return cls(**{"n_layers": n_layers, "n_heads": n_heads, "d_model": d_model, **overrides})

    @classmethod
    def llama_like(cls, **overrides) -> GPTConfig:
        """The modern recipe: RoPE, RMSNorm, SwiGLU, no biases, untied head."""
        base = dict(positional="rope", norm="rmsnorm", ffn="swiglu", bias=False, tie_weights=False, norm_eps=1e-6)
        return cls(**{**base, **overrides})


def make_norm(config: GPTConfig) -> nn.Module:
    if config.norm == "layernorm":
        return LayerNorm(config.d_model, eps=config.norm_eps, bias=config.bias, fast=config.fast)
    return RMSNorm(config.d_model, eps=config.norm_eps, fast=config.fast)


class Block(nn.Module):
    """Attention then feed-forward, each wrapped in a residual connection and a norm.

    pre-norm (GPT-2 and later): x = x + f(norm(x)); post-norm (2017): x = norm(x + f(x)).
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.pre_norm = config.pre_norm
        self.ln_1 = make_norm(config)
        self.attn = MultiHeadAttention(
            config.d_model,
            config.n_heads,
            config.context_length,
            causal=True,
            dropout=config.dropout,
            bias=config.bias,
            fast=config.fast,
            rotary=config.positional == "rope",
            rope_base=config.rope_base,
            alibi=config.positional == "alibi",
            extrapolate=config.positional != "learned",
            n_kv_heads=config.kv_heads,
        )
        self.ln_2 = make_norm(config)
        if config.ffn == "mlp":
            self.mlp = FeedForward(
                config.d_model, config.hidden, config.activation, config.bias, config.dropout, config.fast
            )
        else:
            self.mlp = SwiGLU(config.d_model, config.hidden, config.bias, config.dropout, config.fast)

    def forward(
        self, x: torch.Tensor, cache: LayerKV | StaticLayerKV | None = None, step: StaticStep | None = None
    ) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.ln_1(x), cache=cache, step=step)  # (B, T, C)
            return x + self.mlp(self.ln_2(x))
        x = self.ln_1(x + self.attn(x, cache=cache, step=step))
        return self.ln_2(x + self.mlp(x))


class GPT(nn.Module):
    """(B, T) token ids -> (B, T, vocab_size) logits."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        modules = dict(
            wte=nn.Embedding(config.vocab_size, config.d_model),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layers)),
            ln_f=make_norm(config) if config.pre_norm else nn.Identity(),
        )
        if config.positional == "learned":
            modules["wpe"] = LearnedPositionalEmbedding(config.context_length, config.d_model)
        self.transformer = nn.ModuleDict(modules)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("c_proj.weight", "down_proj.weight")):  # GPT-2: scale residual projections
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))
        if config.tie_weights:
            tie_weights(self)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2's initialisation: N(0, 0.02) weights, zero biases. With a tied head the first
        loss is then close to ln(vocab_size), as it should be for an untrained model."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def embed(self, idx: torch.Tensor, offset: int = 0, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings plus, for learned or sinusoidal schemes, position information
        (the tokens sit at positions offset..offset + T - 1, or at the (B, T) ``positions`` of
        each row of a padded batch)."""
        T = idx.shape[1]
        x = self.transformer.wte(idx)  # (B, T, C)
        if positions is not None:
            if self.config.positional == "learned":
                x = x + self.transformer.wpe.at(positions)  # (B, T, C): each row its own positions
            elif self.config.positional == "sinusoidal":
                x = x * math.sqrt(self.config.d_model) + sinusoidal_at(positions, self.config.d_model).to(x.dtype)
            return self.transformer.drop(x)
        if self.config.positional == "learned":
            x = x + self.transformer.wpe(T, offset)  # (T, C) broadcast over the batch
        elif self.config.positional == "sinusoidal":
            # As in the original transformer (whose paper gives no reason), scale the embeddings
            # by sqrt(d). With the N(0, 0.02) initialisation the encoding still starts about 4.5
            # times larger at d = 64 (RMS 0.71 against 0.16): notebook 06 measures it.
            x = x * math.sqrt(self.config.d_model) + sinusoidal_encoding(T, self.config.d_model, offset=offset).to(
                x.device, x.dtype
            )
        return self.transformer.drop(x)

    def forward(self, idx: torch.Tensor, cache: KVCache | StaticKVCache | None = None) -> torch.Tensor:
        """Logits for every position. With a ``cache`` (see :meth:`new_cache`), ``idx`` holds
        the tokens that follow the cached ones, and their keys and values join the cache.
        With a :class:`StaticKVCache` (see :meth:`new_static_cache`), ``idx`` (B, T) holds the
        next T tokens of each left-padded row."""
        return self.lm_head(self.features(idx, cache))  # (B, T, V)

    def features(self, idx: torch.Tensor, cache: KVCache | StaticKVCache | None = None) -> torch.Tensor:
        """(B, T, C): what the LM head reads, after the final norm. A classifier (chapter 10)
        puts its own head on these."""
        if not torch.compiler.is_compiling():  # one min/max per call; a compiled graph skips it
            check_token_ids(idx, self.config.vocab_size)
        if isinstance(cache, StaticKVCache):
            if torch.is_grad_enabled():
                raise RuntimeError(
                    "the static cache is for generating, not training: run under torch.no_grad() "
                    "(generate_batch does); the KVCache of new_cache() keeps gradients"
                )
            if idx.shape[0] != cache.batch_size:
                raise ValueError(f"the static cache holds {cache.batch_size} rows, but {idx.shape[0]} were given")
            step = cache.step(idx.shape[1])  # slots, positions and mask of these tokens, for every layer
            x = self.embed(idx, positions=step.positions)
            for layer, block in zip(cache.layers, self.transformer.h):
                x = block(x, layer, step)
            return self.transformer.ln_f(x)
        x = self.embed(idx, offset=cache.length if cache is not None else 0)
        for i, block in enumerate(self.transformer.h):
            x = block(x, cache.layers[i] if cache is not None else None)
        return self.transformer.ln_f(x)

    def new_cache(self, max_length: int | None = None) -> KVCache:
        """An empty KV cache for up to ``max_length`` positions (default: the context length)."""
        return KVCache(self.config.n_layers, max_length or self.config.context_length)

    def new_static_cache(self, pad: torch.Tensor, max_length: int) -> StaticKVCache:
        """A preallocated cache for ``len(pad)`` left-padded rows and ``max_length`` slots, on
        the model's device and in its dtype (``pad`` (B,): each row's padding, moved there)."""
        weight = self.transformer.wte.weight
        for block in self.transformer.h:
            if block.attn.rotary is not None:
                block.attn.rotary.reach(self.config.context_length)  # grown now, not inside a compiled step
        return StaticKVCache(
            self.config.n_layers,
            pad.to(weight.device),
            self.config.kv_heads,
            self.config.head_dim,
            max_length,
            self.config.context_length,
            weight.dtype,
        )

    def num_parameters(self) -> int:
        """Distinct parameters (a tied weight counts once)."""
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())


def check_token_ids(idx: torch.Tensor, vocab_size: int) -> None:
    """Refuse what an embedding cannot look up, naming the problem instead of torch's
    "index out of range in self" (or a device-side assert on a GPU)."""
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"token ids must be a tensor of shape (batch, tokens), got {type(idx).__name__}")
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise TypeError(
            f"token ids must be integers (torch.long), got {idx.dtype}; did you pass embeddings or probabilities?"
        )
    if idx.ndim != 2:
        hint = " (add a batch dimension: ids[None])" if idx.ndim == 1 else ""
        raise ValueError(f"token ids must have shape (batch, tokens), got {tuple(idx.shape)}{hint}")
    if idx.shape[1] == 0:
        raise ValueError("the sequence is empty: a model needs at least one token to predict from")
    if idx.device.type == "meta":
        return  # shapes only: a meta tensor has no values to check (the device tests use it)
    low, high = (int(v) for v in torch.aminmax(idx))
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"token id {bad} is outside this model's vocabulary of {vocab_size} (valid ids are 0..{vocab_size - 1}); "
            "is the tokenizer the one the model was trained with?"
        )


def tie_weights(model: GPT) -> None:
    """Share one matrix between the token embedding and the LM head (GPT-2 does)."""
    embedding, head = model.transformer.wte.weight, model.lm_head.weight
    if embedding.shape != head.shape:
        raise ValueError(
            f"cannot tie the LM head {tuple(head.shape)} to the token embedding {tuple(embedding.shape)}: "
            "the shapes differ"
        )
    model.lm_head.weight = embedding


# --------------------------------------------------------------------------------------
# Counting parameters
# --------------------------------------------------------------------------------------


def _component(name: str) -> str:
    if name.startswith("transformer.wte"):
        return "token embedding"
    if name.startswith("transformer.wpe"):
        return "position embedding"
    if ".attn.c_attn" in name:
        return "attention Q, K, V"
    if ".attn.c_proj" in name:
        return "attention output"
    if ".mlp." in name:
        return "feed-forward"
    if "ln_" in name:
        return "norms"
    if name.startswith("lm_head"):
        return "LM head"
    raise ValueError(f"unclassified parameter {name}")


def count_parameters(model: GPT) -> dict[str, int]:
    """Parameters per component, read off the model (a tied head counts as 0), plus the total."""
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():  # named_parameters() lists a shared tensor once
        counts[_component(name)] = counts.get(_component(name), 0) + p.numel()
    counts.setdefault("LM head", 0)
    counts["total"] = sum(counts.values())
    return counts


def count_trainable(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameters, a shared (tied) tensor counted once."""
    params = {id(p): p for p in model.parameters()}.values()
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def parameter_formula(config: GPTConfig) -> dict[str, int]:
    """The same breakdown from the configuration alone."""
    C, L, V, H = config.d_model, config.n_layers, config.vocab_size, config.hidden
    Ckv = config.kv_heads * config.head_dim  # width of the keys and of the values
    b = 1 if config.bias else 0
    norm = C * (2 if config.norm == "layernorm" and config.bias else 1)
    ffn = (2 * C * H + b * (H + C)) if config.ffn == "mlp" else (3 * C * H + b * (2 * H + C))
    counts = {
        "token embedding": V * C,
        "attention Q, K, V": L * ((C + 2 * Ckv) * C + b * (C + 2 * Ckv)),
        "attention output": L * (C * C + b * C),
        "feed-forward": L * ffn,
        "norms": (2 * L + (1 if config.pre_norm else 0)) * norm,
        "LM head": 0 if config.tie_weights else V * C,
    }
    if config.positional == "learned":
        counts["position embedding"] = config.context_length * C
    counts["total"] = sum(counts.values())
    return counts


def gpt3_weight_table(
    n_vocab: int = 50257,
    d_embed: int = 12288,
    n_layers: int = 96,
    n_heads: int = 96,
    d_head: int = 128,
    n_neurons: int = 49152,
) -> list[tuple[str, str, int]]:
    """GPT-3 175B's weight matrices (no biases, norms or positions), as (name, formula, count)."""
    return [
        ("Embedding", "d_embed * n_vocab", d_embed * n_vocab),
        ("Key", "d_head * d_embed * n_heads * n_layers", d_head * d_embed * n_heads * n_layers),
        ("Query", "d_head * d_embed * n_heads * n_layers", d_head * d_embed * n_heads * n_layers),
        ("Value", "d_head * d_embed * n_heads * n_layers", d_head * d_embed * n_heads * n_layers),
        ("Output", "d_embed * d_head * n_heads * n_layers", d_embed * d_head * n_heads * n_layers),
        ("Up-projection", "n_neurons * d_embed * n_layers", n_neurons * d_embed * n_layers),
        ("Down-projection", "d_embed * n_neurons * n_layers", d_embed * n_neurons * n_layers),
        ("Unembedding", "n_vocab * d_embed", n_vocab * d_embed),
    ]


# --------------------------------------------------------------------------------------
# Loading real weights
# --------------------------------------------------------------------------------------


def weight_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with a shared tensor (a tied LM head) kept once, under its first name."""
    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            tensors[name] = tensor.detach()
    return tensors


def load_weights(model: nn.Module, tensors: Mapping[str, torch.Tensor], source: str) -> None:
    """Copy ``tensors`` into ``model`` after checking that names and shapes match one to one.

    The one place weights enter a model: GPT-2, LLaMA and GGUF weights (see :mod:`pretrained`),
    model files, checkpoints.
    """
    own = weight_tensors(model)
    missing = sorted(set(own) - set(tensors))
    unexpected = sorted(set(tensors) - set(own))
    if missing or unexpected:
        raise ValueError(
            f"{source} does not fit this model: "
            f"missing {missing[:5] or 'nothing'}{' ...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5] or 'nothing'}{' ...' if len(unexpected) > 5 else ''}"
        )
    for name, tensor in own.items():
        if tensors[name].shape != tensor.shape:
            raise ValueError(
                f"{source} comes from a model of another shape: {name} is {tuple(tensors[name].shape)} there "
                f"but {tuple(tensor.shape)} in this model"
            )
    with torch.no_grad():
        for name, tensor in own.items():
            tensor.copy_(tensors[name])
