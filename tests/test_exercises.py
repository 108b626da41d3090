"""Every checker accepts the reference solution and rejects the usual mistakes.

One block per exercise, in the order of the course (as in course_lib/exercises.py): a correct
solution written the way a student would, then the typical mistakes the checker must reject.
"""

import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_lib import exercises
from course_lib.exercises import EXERCISES, BannedFunction, Case, banned, check, exercise
from course_lib.generation import filter_logits
from course_lib.grading import solutions
from course_lib.grading.solutions import (
    chunk_pair_counts,
    left_padded_mask,
    llama_parameters,
    local_causal_mask,
    lr_from_zero,
    min_p,
    nearest_tokens,
    padded_windows,
    repetition_penalty,
    smoothed_loss,
    split_windows,
    top_p_min_keep,
    trigram_counts,
    unk_rate,
)

ROOT = Path(__file__).resolve().parents[1]

SOLUTIONS = dict(solutions.SOLUTIONS)  # exercise name -> a correct solution: the shipped ones, then those below
MISTAKES = {}  # exercise name -> wrong solutions, each with the mistake it makes


# == 00 · Language models and PyTorch ======================================================


MISTAKES["trigram-counts"] = [
    lambda ids, v: trigram_counts(ids, v).permute(2, 1, 0),  # indexed (c, b, a)
    lambda ids, v: trigram_counts(ids, max(ids, default=0) + 1),  # vocabulary from the data
    lambda ids, v: trigram_counts(ids[:-1], v),  # drops the last trigram
    lambda ids, v: trigram_counts(ids[::2] + ids[1::2], v),  # tokens out of order
]


def interpolated(counts, lam, unigram_of="next"):
    counts = counts.double()
    rows = counts.sum(1, keepdim=True)
    unigram = (counts.sum(0) if unigram_of == "next" else counts.sum(1)) / counts.sum()
    bigram = torch.where(rows > 0, counts / rows.clamp_min(1), unigram)
    return (lam * bigram + (1 - lam) * unigram).float()


MISTAKES["interpolated-bigram"] = [
    lambda c, lam: interpolated(c, lam, unigram_of="previous"),  # P(b) from the row sums
    lambda c, lam: interpolated(c, 1 - lam),  # lam weighs the unigram
    lambda c, lam: (lam * c / c.sum(1, keepdim=True) + (1 - lam) * c.sum(0) / c.sum()).float(),  # 0/0 rows
    lambda c, lam: (lam * c / c.sum(1, keepdim=True).clamp_min(1) + (1 - lam) * c.sum(0) / c.sum()).float(),
]  # the last: an unseen row keeps only (1 - lam) of the unigram and does not sum to 1

MISTAKES["accumulated-grad"] = [
    lambda x, times: 2 * x + 3,  # as if backward() replaced the gradient
    lambda x, times: times * (x**2 + 3 * x),  # the value, not the derivative
    lambda x, times: (2 * x + 3) ** times,  # multiplies instead of adding
]


def global_max_logsumexp(x):  # the function the exercise shows: one maximum for the whole tensor
    m = x.max()
    return m + (x - m).exp().sum(dim=-1).log()


MISTAKES["logsumexp"] = [
    global_max_logsumexp,
    lambda x: x.exp().sum(dim=-1).log(),  # overflows to inf
    lambda x: x.max(dim=-1).values,  # the max alone
    lambda x: torch.logsumexp(x, dim=-1),  # banned
    torch.logsumexp,  # banned, passed itself
]


# == 01 · Tokenization =====================================================================


MISTAKES["chunk-pair-counts"] = [
    lambda chunks: chunk_pair_counts(dict.fromkeys(chunks, 1)),  # each chunk once
    lambda chunks: chunk_pair_counts({sum(chunks, ()): 1}),  # one stream: pairs across chunks
    lambda chunks: {p: n for c, n in chunks.items() for p in zip(c[::2], c[1::2])},  # no overlaps, no sum
]


def buggy_encode_with_special(text, special_id):  # the function the exercise shows
    ids = []
    for piece in text.split("<|endoftext|>"):
        ids += list(piece.encode("utf-8")) + [special_id]
    return ids


MISTAKES["encode-with-special"] = [
    buggy_encode_with_special,
    lambda text, sid: buggy_encode_with_special(text, sid)[:-1] if text.endswith("<|endoftext|>") else [],
    lambda text, sid: [sid if t == "" else b for t in text.split("<|endoftext|>") for b in t.encode()],
    lambda text, sid: [ord(c) for c in text.replace("<|endoftext|>", chr(sid))],  # characters, not bytes
]


def shortest_match(text, vocab):
    tokens, i = [], 0
    while i < len(text):
        n = next((n for n in range(1, len(text) - i + 1) if text[i : i + n] in vocab), 1)
        tokens.append(text[i : i + n])
        i += n
    return tokens


MISTAKES["longest-match"] = [
    shortest_match,
    lambda text, vocab: list(text),  # characters only
    lambda text, vocab: [t for t in sorted(vocab, key=len, reverse=True) if t in text][:1] or list(text),
]

MISTAKES["unk-rate"] = [
    lambda tr, va, m: unk_rate(tr, va, m + 1),  # > min_count
    lambda tr, va, m: unk_rate(tr, sorted(set(va)), m),  # distinct validation words
    lambda tr, va, m: 1 - unk_rate(tr, va, m),  # the known share
]


# == 02 · Embeddings and training data =====================================================


def without_short_window(ids, c, pad):
    inputs, targets = padded_windows(ids, c, pad)
    return (inputs[:-1], targets[:-1]) if (len(ids) - 1) % c else (inputs, targets)


MISTAKES["padded-windows"] = [
    without_short_window,
    lambda ids, c, pad: tuple(t.masked_fill(t == -100, pad) for t in padded_windows(ids, c, pad)),  # pads targets
    lambda ids, c, pad: tuple(t.roll(-1, 0) for t in padded_windows(ids, c, pad)),  # windows out of order
]

MISTAKES["embedding-grad"] = [
    lambda w, ids: 2 * w * (torch.bincount(ids.flatten(), minlength=w.shape[0]) > 0)[:, None],  # once per row
    lambda w, ids: torch.bincount(ids.flatten(), minlength=w.shape[0])[:, None] * w,  # forgets the 2
    lambda w, ids: 2 * w,  # every row, looked up or not
]


def leaky_split(ids, c, stride, val_fraction):  # the function the exercise shows, seed 0
    starts = range(0, len(ids) - c, stride)
    x = torch.stack([ids[s : s + c] for s in starts])
    y = torch.stack([ids[s + 1 : s + c + 1] for s in starts])
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    n_val = int(len(x) * val_fraction)
    val, train = order[:n_val], order[n_val:]
    return x[train], y[train], x[val], y[val]


MISTAKES["split-windows"] = [
    leaky_split,
    lambda ids, c, s, f: split_windows(ids, c, c, f),  # ignores the stride
    lambda ids, c, s, f: split_windows(ids.flip(0), c, s, 1 - f)[2:] + split_windows(ids.flip(0), c, s, 1 - f)[:2],
]  # the last: validation first


def nearest_by_dot(weight, token, k):
    scores = weight @ weight[token]
    scores[token] = float("-inf")
    return scores.topk(k).indices.tolist()


MISTAKES["nearest-tokens"] = [
    lambda w, t, k: [t] + nearest_tokens(w, t, k)[: k - 1],
    nearest_by_dot,
    lambda w, t, k: nearest_tokens(w, t, w.shape[0] - 1)[::-1][:k],
]  # itself first; a plain dot product; the least similar


# == 03 · The MLP language model ===========================================================


def smoothed_other_classes(logits, targets, eps):  # eps / (V - 1) on every other class, none on the true one
    V = logits.shape[-1]
    q = torch.full_like(logits, eps / (V - 1)).scatter(-1, targets[:, None], 1 - eps)  # (N, V)
    return -(q * logits.log_softmax(-1)).sum(-1).mean()


def smoothed_via_softmax(logits, targets, eps):  # log of a softmax: log 0 = -inf for large logits
    q = torch.full_like(logits, eps / logits.shape[-1])
    q[torch.arange(len(targets)), targets] += 1 - eps
    return -(q * torch.softmax(logits, -1).log()).sum(-1).mean()


MISTAKES["label-smoothing"] = [
    lambda z, y, eps: SOLUTIONS["label-smoothing"](z, y, 0.0),  # no smoothing at all
    smoothed_other_classes,
    smoothed_via_softmax,
    lambda z, y, eps: SOLUTIONS["label-smoothing"](z, y, eps) * len(y),  # the sum over rows
    lambda z, y, eps: F.cross_entropy(z, y, label_smoothing=eps),  # right, but banned
]


def window_losses_as_shown(logits, targets):  # the function the exercise shows
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    return losses.mean(dim=1)


def window_losses_one_count(logits, targets):  # every window divided by the whole batch's count
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return losses.sum(dim=1) / (targets != -100).sum()


MISTAKES["window-losses"] = [
    window_losses_as_shown,
    window_losses_one_count,
    lambda z, y: F.cross_entropy(z.flatten(0, 1), y.flatten()),  # one number for the batch
]


def min_loss_contexts_anywhere(ids, c):  # N(context) also counts a context with no token after it
    from collections import Counter

    pairs = Counter((tuple(ids[t - c : t]), ids[t]) for t in range(c, len(ids)))
    contexts = Counter(tuple(ids[t - c : t]) for t in range(c, len(ids) + 1))
    return sum(n * -math.log(n / contexts[ctx]) for (ctx, _), n in pairs.items()) / (len(ids) - c)


def min_loss_per_context(ids, c):  # each distinct context's entropy, averaged without weights
    from collections import Counter

    pairs = Counter((tuple(ids[t - c : t]), ids[t]) for t in range(c, len(ids)))
    by_context = {}
    for (ctx, _), n in pairs.items():
        by_context.setdefault(ctx, []).append(n)
    entropies = [sum(-n / sum(ns) * math.log(n / sum(ns)) for n in ns) for ns in by_context.values()]
    return sum(entropies) / len(entropies)


def min_loss_by_ngram(ids, c):  # right (the n-gram without smoothing is that model), but banned
    from course_lib.ngram import NGramLanguageModel

    return NGramLanguageModel(order=c + 1, vocab_size=max(ids) + 1, alpha=0).fit(ids).cross_entropy(ids)


MISTAKES["min-training-loss"] = [
    min_loss_contexts_anywhere,
    lambda ids, c: SOLUTIONS["min-training-loss"](ids, c) / math.log(2),  # bits
    min_loss_per_context,
    min_loss_by_ngram,
]

MISTAKES["bits-per-character"] = [
    lambda losses, texts: sum(losses) / math.log(2) / len(losses),  # bits per token
    lambda losses, texts: sum(x / math.log(2) / len(t) for x, t in zip(losses, texts)) / len(texts),  # mean of ratios
    lambda losses, texts: sum(losses) * math.log(2) / sum(len(t) for t in texts),  # times ln 2
]


# == 04 · Self-attention ===================================================================


def linear_weights(q, k, phi=lambda x: F.elu(x) + 1):
    w = phi(q) @ phi(k).transpose(-2, -1)
    return w / w.sum(-1, keepdim=True)


MISTAKES["linear-attention"] = [
    lambda q, k, v: (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1) @ v,  # no denominator
    lambda q, k, v: linear_weights(q, k, phi=lambda x: x.exp()) @ v,  # exp: softmax attention again
    lambda q, k, v: linear_weights(q / q.shape[-1] ** 0.25, k / q.shape[-1] ** 0.25) @ v,  # scaled as softmax's
    lambda q, k, v: linear_weights(q, k) @ (F.elu(v) + 1),  # phi on the values
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v),  # banned
]

MISTAKES["score-scale"] = [
    lambda d, vq, vk: math.sqrt(d),  # ignores the variances
    lambda d, vq, vk: d * vq * vk,  # the variance, not its square root
    lambda d, vq, vk: math.sqrt(d * (vq + vk)),  # adds the variances
]


def pool_over_batch(x, query):  # the function the exercise shows
    weights = torch.softmax(x @ query / math.sqrt(x.shape[-1]), dim=0)
    return (weights.unsqueeze(-1) * x).sum(dim=1)


MISTAKES["attention-pool"] = [
    pool_over_batch,
    lambda x, query: x.mean(dim=1),  # no attention at all
    lambda x, query: (torch.softmax(x @ query, dim=-1).unsqueeze(-1) * x).sum(dim=1),  # no sqrt(d)
]

MISTAKES["attention-entropy"] = [
    lambda w: -(w * w.log()).sum(-1).mean().item(),  # nan where a weight is 0
    lambda w: -(w * (w + 1e-3).log()).sum(-1).mean().item(),  # an epsilon that moves every answer
    lambda w: -(w * w.clamp_min(1e-30).log()).sum(-1).mean().item() / math.log(w.shape[-1]) if w.shape[-1] > 1 else 0.0,
    lambda w: -(w * w.clamp_min(1e-30).log()).sum().item(),  # the sum over rows, not the mean
]  # the third: normalised by log T


# == 05 · Causal masking and multi-head attention ==========================================


MISTAKES["local-causal-mask"] = [
    lambda T, w: local_causal_mask(T, w + 1),  # i - j <= window
    lambda T, w: (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs() < w,  # both sides
    lambda T, w: local_causal_mask(T, w).T,  # the upper triangle
]


def buggy_left_padded_mask(lengths, T):  # the function the exercise shows
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    real = torch.arange(T) < lengths[:, None]
    return causal & real[:, None, :]


MISTAKES["left-padded-mask"] = [
    buggy_left_padded_mask,
    lambda lengths, T: left_padded_mask(lengths, T) & (torch.arange(T) >= (T - lengths)[:, None])[:, :, None],
    lambda lengths, T: torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(len(lengths), T, T),  # no padding
    lambda lengths, T: (
        torch.tril(torch.ones(T, T, dtype=torch.bool)) & (torch.arange(T) >= (T - lengths)[:, None])[:, None, :]
    ),  # empty rows for the padding queries
]  # the second: padding queries see nothing, not even themselves

MISTAKES["mha-parameters"] = [
    lambda C, H: 4 * C * C,  # no biases
    lambda C, H: H * 3 * (C * C + C) + C * C + C,  # each head as wide as the model
    lambda C, H: 3 * (C * C + C),  # forgets the output projection
]

MISTAKES["previous-token-score"] = [
    lambda w: torch.diagonal(w, offset=1, dim1=-2, dim2=-1).mean(-1),  # the next token
    lambda w: torch.diagonal(w, dim1=-2, dim2=-1).mean(-1),  # itself
    lambda w: torch.diagonal(w, offset=-1, dim1=-2, dim2=-1).sum(-1) / w.shape[-1],  # divides by T
]


# == 06 · Positional encodings =============================================================


def rope_frequencies_with_base(head_dim, base):
    return base ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


MISTAKES["rope-scaling"] = [
    lambda d, s, m: (
        rope_frequencies_with_base(d, 1e4) / s if m == "linear" else rope_frequencies_with_base(d, 1e4 * s)
    ).float(),  # NTK: the base times scale
    lambda d, s, m: SOLUTIONS["rope-scaling"](d, 1 / s, m) if m == "linear" else SOLUTIONS["rope-scaling"](d, s, m),
    lambda d, s, m: (
        rope_frequencies_with_base(d, 1e4) / s
        if m == "linear"
        else rope_frequencies_with_base(d, 1e4 * s ** ((d - 2) / d))
    ).float(),  # the exponent upside down
    lambda d, s, m: SOLUTIONS["rope-scaling"](d, s, "linear"),  # NTK taken for linear
]


def alibi_as_shown(slopes, T):  # the function the exercise shows: j - i, future keys only
    position = torch.arange(T)
    distance = (position[None, :] - position[:, None]).clamp(min=0)  # (T, T)
    return -slopes[:, None, None] * distance


def alibi_absolute(slopes, T):  # |i - j|: the future gets a bias too
    position = torch.arange(T)
    return -slopes[:, None, None] * (position[:, None] - position[None, :]).abs()


MISTAKES["alibi-bias"] = [
    alibi_as_shown,
    lambda slopes, T: -SOLUTIONS["alibi-bias"](slopes, T),  # the sign: far keys favoured
    alibi_absolute,
    lambda slopes, T: SOLUTIONS["alibi-bias"](slopes, T) - slopes[:, None, None] * torch.ones(T, T).tril(),  # i - j + 1
]


def stretch_ends_move(table, new_length):  # x = p * L / new_length: the last row is never reached
    L = table.shape[0]
    x = torch.arange(new_length, dtype=torch.float64) * L / new_length
    low = x.floor().long().clamp(max=L - 2)
    w = (x - low).clamp(max=1).to(table.dtype)[:, None]
    return (1 - w) * table[low] + w * table[low + 1]


def stretch_nearest(table, new_length):  # the nearest row, no mix
    x = torch.arange(new_length, dtype=torch.float64) * (table.shape[0] - 1) / (new_length - 1)
    return table[x.round().long()]


MISTAKES["stretch-positions"] = [
    stretch_ends_move,
    stretch_nearest,
    lambda table, n: F.interpolate(table.T[None], size=n, mode="linear", align_corners=True)[0].T,  # banned
]


def reach_from_oldest(slope, T, share):  # adds the weights from the first key in the window
    weights = torch.exp(-slope * torch.arange(T, dtype=torch.float64)).flip(0)
    mass = (weights / weights.sum()).cumsum(0)
    return int((mass < share).sum()) + 1


MISTAKES["alibi-reach"] = [
    reach_from_oldest,
    lambda slope, T, share: math.ceil(math.log(1 - share) / -slope),  # an infinite past: T ignored
    lambda slope, T, share: SOLUTIONS["alibi-reach"](slope, T, share) - 1,  # the index, not the count
]


# == 07 · The transformer block and the GPT model ==========================================


MISTAKES["llama-parameters"] = [
    lambda V, C, L, h: llama_parameters(V, C, L, h) - V * C,  # a tied head
    lambda V, C, L, h: llama_parameters(V, C, L, h) + L * (4 * C + 3 * h + C) + L * 2 * C,  # biases and shifts
    lambda V, C, L, h: llama_parameters(V, C, L, h) - 3 * C * h * L + 8 * C * C * L,  # GPT-2's 4C MLP
]


def rms_over_dim_1(x, weight, eps):  # the function the exercise shows
    return x / torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + eps) * weight


MISTAKES["rms-norm"] = [
    rms_over_dim_1,
    lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps) * w,  # the sum, not the mean
    lambda x, w, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * w,
    lambda x, w, eps: torch.nn.functional.rms_norm(x, w.shape, w, eps),  # banned
]  # the third: a LayerNorm

MISTAKES["residual-std"] = [
    lambda L, s: math.sqrt(1 + L * s**2),  # one branch a block
    lambda L, s: 1 + 2 * L * s,  # adds standard deviations
    lambda L, s: math.sqrt(2 * L) * s,  # forgets the embeddings
]

MISTAKES["dead-fraction"] = [
    lambda h: (h <= 0).float().mean().item(),  # the share of entries, not of units
    lambda h: (h.reshape(-1, h.shape[-1]) < 0).all(0).float().mean().item(),  # 0 counted as alive
    lambda h: (h.reshape(-1, h.shape[-1]) <= 0).all(1).float().mean().item(),  # positions, not units
]


# == 08 · Pretraining ======================================================================


def cosine_from_step_zero(s, hi, lo, w, t):
    if s < w:
        return hi * s / w
    return lo + (hi - lo) * (1 + math.cos(math.pi * min(s, t) / t)) / 2


MISTAKES["lr-from-zero"] = [
    lambda s, hi, lo, w, t: hi * (s + 1) / w if s < w else lr_from_zero(s, hi, lo, w, t),  # the chapter's warmup
    lambda s, hi, lo, w, t: lr_from_zero(s, hi, 0.0, w, t),  # decays to 0
    cosine_from_step_zero,
]


def adamw_by_torch(w, g, lr, weight_decay):
    p = torch.nn.Parameter(w.clone())
    p.grad = g.clone()
    torch.optim.AdamW([p], lr=lr, weight_decay=weight_decay).step()
    return p.detach()


MISTAKES["adamw-first-step"] = [
    lambda w, g, lr, wd: w * (1 - lr * wd) - lr * g,  # SGD: the step scales with the gradient
    lambda w, g, lr, wd: w - lr * (g + wd * w) / ((g + wd * w).abs() + 1e-8),  # L2 in the gradient: Adam, not AdamW
    lambda w, g, lr, wd: w - lr * wd * w - lr * g / (g.abs() + 1e-8) * (1 - 0.9),  # m without bias correction
    adamw_by_torch,  # right, but banned
]

MISTAKES["accumulated-gradient"] = [
    lambda grads, sizes: sum(grads) / len(grads),  # the plain mean: the function the exercise shows
    lambda grads, sizes: sum(grads),  # the sum: k times too large
    lambda grads, sizes: sum(n * g for n, g in zip(sizes, grads)) / len(grads),  # weighted, divided by k
]


def smoothed_without_correction(values, beta):
    s, out = 0.0, []
    for x in values:
        s = beta * s + (1 - beta) * x
        out.append(s)
    return out


MISTAKES["smoothed-loss"] = [
    smoothed_without_correction,
    lambda values, beta: smoothed_loss(values, 1 - beta),  # beta on the new value
    lambda values, beta: [sum(values[: t + 1]) / (t + 1) for t in range(len(values))],  # a running mean
]


# == 09 · Generating text ==================================================================


MISTAKES["top-p-min-keep"] = [
    lambda logits, p, keep: top_p_min_keep(logits, p, 1),  # ignores min_tokens_to_keep
    lambda logits, p, keep: top_p_min_keep(logits, 1.0, keep) if keep > 1 else top_p_min_keep(logits, p, 1),
    lambda logits, p, keep: top_p_min_keep(logits, p, keep - 1),  # keeps one too few
    lambda logits, p, keep: filter_logits(logits, top_p=p),  # banned
]  # the second: min_tokens_to_keep > 1 keeps everything

MISTAKES["min-p"] = [
    lambda logits, m: logits.masked_fill(logits < m * logits.amax(-1, keepdim=True), float("-inf")),  # on logits
    lambda logits, m: min_p(logits.flatten()[None], m).view_as(logits),  # one maximum for the batch
    lambda logits, m: logits.masked_fill(torch.softmax(logits, -1) < m, float("-inf")),  # absolute threshold
]


def buggy_repetition_penalty(logits, previous, penalty):  # the function the exercise shows
    logits = logits.clone()
    for token in previous:
        logits[token] = logits[token] / penalty
    return logits


MISTAKES["repetition-penalty"] = [
    buggy_repetition_penalty,
    lambda logits, prev, pen: buggy_repetition_penalty(logits, set(prev), pen),  # the sign still wrong
    lambda logits, prev, pen: repetition_penalty(repetition_penalty(logits, prev, pen), prev[1:], pen),
]  # the last: penalises a repeat again

MISTAKES["distinct-n"] = [
    lambda tokens, n: len(set(tokens)) / len(tokens),  # distinct tokens, not n-grams
    lambda tokens, n: len({tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}) / len(tokens),
    lambda tokens, n: (
        len({tuple(tokens[i : i + n]) for i in range(0, len(tokens) - n + 1, n)}) / max(1, len(tokens) // n)
    ),
]  # divided by the tokens; n-grams that do not overlap


# == 10 · Fine-tuning for classification ===================================================


def mean_pooling_over_t(features, lengths):  # the masked sum divided by T, not by the length
    real = torch.arange(features.shape[1]) < lengths[:, None]
    return (features * real[..., None]).sum(1) / features.shape[1]


MISTAKES["mean-pooling"] = [
    lambda features, lengths: features.mean(dim=1),  # padding averaged in
    mean_pooling_over_t,
    lambda features, lengths: SOLUTIONS["mean-pooling"](features, (lengths - 1).clamp(min=1)),  # one token too few
]


def exercises_evaluation():  # the module whose functions some exercises ban
    from course_lib import evaluation

    return evaluation


def holm_as_shown(p_values):  # the function the exercise shows: no running maximum
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    for rank, i in enumerate(order):
        adjusted[i] = min(1.0, (m - rank) * p_values[i])
    return adjusted


MISTAKES["holm-adjust"] = [
    holm_as_shown,
    lambda p: [min(1.0, len(p) * x) for x in p],  # Bonferroni
    lambda p: sorted(SOLUTIONS["holm-adjust"](p)),  # in sorted order, not the input's
    lambda p: exercises_evaluation().holm(p),  # right, but banned
]


def mcnemar_chi_square(a, b):  # the normal approximation, wrong for few disagreements
    return 1.0 if a + b == 0 else math.erfc(math.sqrt((a - b) ** 2 / (a + b) / 2))


MISTAKES["mcnemar-exact"] = [
    lambda a, b: SOLUTIONS["mcnemar-exact"](a, b) / 2,  # one tail only
    lambda a, b: 2 * sum(math.comb(a + b, k) for k in range(min(a, b) + 1)) / 2 ** (a + b),  # no cap at 1
    mcnemar_chi_square,
    lambda a, b: exercises_evaluation().mcnemar_p(a, b),  # right, but banned
]


def macro_f1_of_means(predictions, labels):  # the F1 of the mean precision and the mean recall
    classes = sorted(set(labels) | set(predictions))
    pairs = list(zip(predictions, labels))
    precision = [sum(p == y == k for p, y in pairs) / max(1, sum(p == k for p, _ in pairs)) for k in classes]
    recall = [sum(p == y == k for p, y in pairs) / max(1, sum(y == k for _, y in pairs)) for k in classes]
    P, R = sum(precision) / len(classes), sum(recall) / len(classes)
    return 2 * P * R / (P + R) if P + R else 0.0


MISTAKES["macro-f1"] = [
    lambda predictions, labels: sum(p == y for p, y in zip(predictions, labels)) / len(labels),  # the accuracy
    lambda predictions, labels: SOLUTIONS["macro-f1"](
        [p if p in labels else labels[0] for p in predictions], labels
    ),  # only the labels' classes (a predicted-only class dropped)
    macro_f1_of_means,
]


# == 11 · Instruction fine-tuning ==========================================================


def instruct_collate(sequences, pad_id):
    length = max(len(s) for s in sequences)
    rows = torch.tensor([s + [pad_id] * (length - len(s)) for s in sequences])
    targets = rows[:, 1:].clone()
    for k, s in enumerate(sequences):
        targets[k, len(s) - 1 :] = -100  # after the row's own end-of-text
    return rows[:, :-1], targets


def collate_all_padding_ignored(sequences, pad_id):
    inputs, targets = instruct_collate(sequences, pad_id)
    return inputs, targets.masked_fill(targets == pad_id, -100)  # the closing end-of-text too: never learns to stop


def collate_padding_kept(sequences, pad_id):
    length = max(len(s) for s in sequences)
    rows = torch.tensor([s + [pad_id] * (length - len(s)) for s in sequences])
    return rows[:, :-1], rows[:, 1:]  # padding stays a target


SOLUTIONS["instruct-collate"] = instruct_collate
MISTAKES["instruct-collate"] = [
    collate_all_padding_ignored,
    collate_padding_kept,
    lambda seqs, pad: (lambda i, t: (i, i))(*instruct_collate(seqs, pad)),  # targets not shifted
]


def prompt_template(instruction, input_text):
    text = f"### Instruction:\n{instruction.strip()}\n\n"
    if input_text.strip():
        text += f"### Input:\n{input_text.strip()}\n\n"
    return text + "### Response:\n"


SOLUTIONS["prompt-template"] = prompt_template
MISTAKES["prompt-template"] = [
    lambda ins, inp: f"### Instruction:\n{ins.strip()}\n\n### Input:\n{inp.strip()}\n\n### Response:\n",  # always
    lambda ins, inp: prompt_template(ins, inp).removesuffix("\n"),  # the answer would start on the same line
    lambda ins, inp: f"### Instruction:\n{ins}\n\n" + (f"### Input:\n{inp}\n\n" if inp else "") + "### Response:\n",
]


# == 12 · Prompting, inference-time compute, and limits ====================================


def few_shot(examples, query):
    text = "".join(f"Sentence: {x}\nArea: {y}\n\n" for x, y in examples)
    return text + f"Sentence: {query.strip()}\nArea:"


SOLUTIONS["few-shot-prompt"] = few_shot
MISTAKES["few-shot-prompt"] = [
    lambda ex, q: few_shot(ex, q) + " ",  # a space after "Area:": the label's own space is doubled
    lambda ex, q: "\n".join(f"Sentence: {x}\nArea: {y}" for x, y in ex) + f"Sentence: {q.strip()}\nArea:",
    lambda ex, q: few_shot(ex, q).replace(f"Sentence: {q.strip()}", f"Sentence: {q}"),  # query not stripped
]


def vote(answers):
    readable = [a for a in answers if a is not None]
    if not readable:
        return None
    return max(readable, key=lambda a: (readable.count(a), -readable.index(a)))


SOLUTIONS["majority-vote"] = vote
MISTAKES["majority-vote"] = [
    lambda answers: answers[0],  # the first sample, no vote
    lambda answers: max(set(answers), key=answers.count),  # None votes, ties arbitrary
    lambda answers: max(reversed([a for a in answers if a is not None]), key=answers.count, default=None),  # last tie
]


# == the checks ============================================================================


def test_every_exercise_has_a_solution_and_mistakes():
    assert set(SOLUTIONS) == set(EXERCISES) == set(MISTAKES)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_checker_accepts_a_correct_solution(name):
    result = check(name, SOLUTIONS[name])
    assert result, repr(result)
    assert repr(result).startswith(f"✅ {name}: all ")


@pytest.mark.parametrize("name, k", [(n, k) for n, ms in MISTAKES.items() for k in range(len(ms))])
@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom:UserWarning")  # a mistake on a 1-wide case
def test_checker_rejects_typical_mistakes(name, k):
    result = check(name, MISTAKES[name][k])
    assert not result
    message = repr(result)
    assert message.startswith(f"❌ {name}: case ")
    for part in ("input:", "expected:", "got:", "hint"):
        assert part in message


@pytest.fixture
def fresh_kernel(monkeypatch):
    """No failed attempt yet: the checker's memory of earlier failures, emptied."""
    monkeypatch.setattr(exercises, "FAILURES", {})


def test_a_starter_function_gets_one_neutral_line_with_no_case_and_no_hint(fresh_kernel):
    def starter(ids, vocab_size):
        raise NotImplementedError("your code here")

    result = check("trigram-counts", starter)
    assert not result and repr(result) == "✏️ trigram-counts: not attempted yet; write your function and run this cell"
    assert exercises.FAILURES == {}  # not a failed attempt: the first real failure still gets the nudge only


def test_an_exception_after_the_first_case_is_explained(fresh_kernel):
    def broken(ids, vocab_size):
        if ids == [2, 2, 2, 2]:  # the second case
            raise NotImplementedError("todo")
        return trigram_counts(ids, vocab_size)

    def unreadable(ids, vocab_size):
        raise ValueError("no idea")

    assert "case 2 of 4 failed" in repr(check("trigram-counts", broken))
    assert "raised ValueError: no idea" in repr(check("trigram-counts", unreadable))


def test_hints_come_in_steps_one_more_after_each_failure(fresh_kernel):
    steps = EXERCISES["logsumexp"].hints
    assert len(steps) == 3
    wrong = MISTAKES["logsumexp"][0]
    for shown in (1, 2, 3, 3):
        message = repr(check("logsumexp", wrong))
        assert [s in message for s in steps] == [True] * shown + [False] * (3 - shown)
        assert ("each failed run shows one more step" in message) == (shown < 3)
    assert check("logsumexp", SOLUTIONS["logsumexp"])  # passing leaves the count alone: no harm


def test_a_banned_function_fails_passed_called_or_imported_and_comes_back_afterwards():
    from torch import logsumexp as imported

    def by_its_own_name(x):
        return imported(x, dim=-1)

    for fn in (torch.logsumexp, lambda x: torch.logsumexp(x, -1), lambda x: x.logsumexp(-1), by_its_own_name):
        message = repr(check("logsumexp", fn))
        assert message.startswith("❌ logsumexp: case 1 of") and "torch." in message and "ban" in message
    assert torch.logsumexp is imported and by_its_own_name(torch.zeros(2)).item() == pytest.approx(math.log(2))
    assert torch.zeros(2).logsumexp(0).item() == pytest.approx(math.log(2))
    assert "logsumexp" not in torch.Tensor.__dict__  # the method is the C one again


def test_a_ban_names_itself_and_is_lifted_even_when_the_check_fails():
    with pytest.raises(BannedFunction, match="torch.nn.functional.layer_norm is banned"):
        with banned(["torch.nn.functional.layer_norm"]):
            torch.nn.LayerNorm(4)(torch.ones(2, 4))  # the module calls the banned function too
    assert torch.nn.LayerNorm(4)(torch.ones(2, 4)).shape == (2, 4)
    with pytest.raises(AttributeError, match="no such function"):
        exercise("misspelt-ban", hint="", bans=["torch.logsumexpp"])


def test_every_exercise_without_a_reference_answers_each_case_itself():
    for name, ex in EXERCISES.items():
        if ex.reference is None:
            assert all(c.expected is not exercises._FROM_REFERENCE for c in ex.cases()), name


def test_the_adamw_prediction_is_what_torch_does():
    g = torch.Generator().manual_seed(0)
    for lr, wd in [(1e-3, 0.1), (0.5, 0.0), (3e-4, 1.0)]:
        w, grad = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g) * 10
        assert torch.allclose(SOLUTIONS["adamw-first-step"](w, grad, lr, wd), adamw_by_torch(w, grad, lr, wd))


def test_unknown_exercise_lists_the_known_ones():
    with pytest.raises(KeyError, match="known exercises: accumulated-grad, accumulated-gradient, adamw-first-step"):
        check("no-such-exercise", lambda: None)


def test_exercises_are_defined_in_the_order_the_notebooks_use_them():
    used = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                used += re.findall(r'check\("([a-z0-9-]+)"', "".join(cell["source"]))
    assert list(dict.fromkeys(used)) == list(EXERCISES)


def test_an_exercise_name_is_defined_once():
    with pytest.raises(ValueError, match="'trigram-counts' is defined twice"):
        exercise("trigram-counts", reference=list, hint="")(lambda: [Case(([1, 2],))])
    assert EXERCISES["trigram-counts"].hint.startswith("a trigram is three tokens")


def test_every_solution_is_shown_to_an_instructor():
    for name in EXERCISES:
        assert solutions.show(name).strip(), name
    assert "def trigram_counts(" in solutions.show("trigram-counts")
    assert "dpo_loss" in solutions.show("dpo-loss")  # an exercise shown by its reference


# == 13 · Learning from preferences and rewards ============================================


def dpo(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta):
    chosen = beta * (policy_chosen - reference_chosen)
    rejected = beta * (policy_rejected - reference_rejected)
    return -F.logsigmoid(chosen - rejected).mean()


SOLUTIONS["dpo-loss"] = dpo
MISTAKES["dpo-loss"] = [
    lambda pc, pr, rc, rr, beta: -F.logsigmoid(beta * (pc - pr)).mean(),  # no reference
    lambda pc, pr, rc, rr, beta: dpo(pr, pc, rr, rc, beta),  # chosen and rejected swapped
    lambda pc, pr, rc, rr, beta: dpo(pc, pr, rc, rr, 1.0),  # beta left out
    lambda pc, pr, rc, rr, beta: -F.logsigmoid(beta * ((pc - rc) - (pr - rr))).sum(),  # summed, not averaged
    lambda pc, pr, rc, rr, beta: -torch.sigmoid(beta * ((pc - rc) - (pr - rr))).mean(),  # sigmoid without the log
]


def advantages(rewards):
    return (rewards - rewards.mean(dim=1, keepdim=True)) / (rewards.std(dim=1, keepdim=True) + 1e-4)


SOLUTIONS["group-advantages"] = advantages
MISTAKES["group-advantages"] = [
    lambda r: (r - r.mean()) / (r.std() + 1e-4),  # the whole batch as one group
    lambda r: r - r.mean(dim=1, keepdim=True),  # not divided by the group's spread
    lambda r: (r - r.mean(dim=1, keepdim=True)) / r.std(dim=1, keepdim=True),  # no epsilon: 0/0 for equal rewards
    lambda r: (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True, unbiased=False) + 1e-4),  # divides by G
]


def _reversed_sum(prompt):
    a, b = prompt.rstrip("=").split("+")
    return str(int(a) + int(b))[::-1]


def addition_checker(prompt, answer):
    return 1.0 if answer.strip() == _reversed_sum(prompt) else 0.0


SOLUTIONS["addition-checker"] = addition_checker
MISTAKES["addition-checker"] = [
    lambda p, a: 1.0 if _reversed_sum(p) in a else 0.0,  # loose: the digits anywhere
    lambda p, a: 1.0 if a.strip().isdigit() and int(a) == int(_reversed_sum(p)) else 0.0,  # int(): '028' passes
    lambda p, a: 1.0 if a == _reversed_sum(p) else 0.0,  # no strip: ' 28\n' fails
    lambda p, a: 1.0 if a.strip() == _reversed_sum(p)[::-1] else 0.0,  # the usual order
]


# == 14 · Fast inference on a laptop =======================================================


def absmax_int8(weight):
    absmax = weight.abs().amax(dim=1).float()
    scale = torch.where(absmax > 0, absmax / 127, torch.ones_like(absmax))
    return torch.round(weight.float() / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


SOLUTIONS["int8-absmax"] = absmax_int8
MISTAKES["int8-absmax"] = [
    lambda w: (
        torch.round(w / (w.abs().max() / 127)).to(torch.int8),
        (w.abs().max() / 127).expand(w.shape[0]),
    ),  # one scale
    lambda w: (torch.round(w / (w.abs().amax(0) / 127)).to(torch.int8), w.abs().amax(0) / 127),  # per column
    lambda w: (
        torch.trunc(w / (w.abs().amax(1, keepdim=True) / 127)).to(torch.int8),
        w.abs().amax(1) / 127,
    ),  # truncates
    lambda w: (
        torch.round(w / (w.abs().amax(1, keepdim=True) / 255)).to(torch.int8),
        w.abs().amax(1) / 255,
    ),  # 255 levels
]


def residual(p, q):
    left = (p - q).clamp_min(0)
    total = left.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, left / total.clamp_min(1e-30), p)


SOLUTIONS["residual-distribution"] = residual
MISTAKES["residual-distribution"] = [
    lambda p, q: (p - q).clamp_min(0),  # not renormalised
    lambda p, q: (p - q).abs() / (p - q).abs().sum(dim=-1, keepdim=True),  # |p - q| instead of max(0, p - q)
    lambda p, q: (p - q).clamp_min(0) / (p - q).clamp_min(0).sum(),  # one sum over the whole batch
    lambda p, q: p,  # draws from the target again: rejected tokens come back too often
]


def lookup(ids, k):
    for n in range(min(3, len(ids) - 1), 0, -1):
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start : start + n] == ids[-n:]:
                return ids[start + n : start + n + k]
    return []


def lookup_first(ids, k):  # the earliest occurrence instead of the most recent
    for n in range(min(3, len(ids) - 1), 0, -1):
        for start in range(len(ids) - n):
            if ids[start : start + n] == ids[-n:]:
                return ids[start + n : start + n + k]
    return []


SOLUTIONS["prompt-lookup"] = lookup
MISTAKES["prompt-lookup"] = [
    lookup_first,
    lambda ids, k: next(  # only 1-grams
        (ids[s + 1 : s + 1 + k] for s in range(len(ids) - 2, -1, -1) if ids[s] == ids[-1]), []
    ),
    lambda ids, k: lookup(ids, k)[:1],  # one token only
]


# == 15 · What the model learned ===========================================================


MISTAKES["uniform-previous-token-score"] = [
    lambda T: 1 / T,  # 1/T at every position
    lambda T: sum(1 / (t + 1) for t in range(T)) / T,  # position 0 counted, with weight 1
    lambda T: sum(1 / t for t in range(1, T)) / (T - 1),  # 1/t: t positions instead of t + 1
]


def duplicate_scores(attention, period, shift=0, all_queries=False):
    T = attention[0].shape[-1]
    queries = torch.arange(period if all_queries else T - period, T)
    return torch.stack([a[:, :, queries, queries - period + shift].mean(dim=(0, 2)) for a in attention])


MISTAKES["duplicate-token-scores"] = [
    lambda a, p: duplicate_scores(a, p, shift=1),  # the induction score
    lambda a, p: duplicate_scores(a, p, all_queries=True),  # queries from position `period` on
    lambda a, p: duplicate_scores(a, p).mean(dim=1, keepdim=True).expand(len(a), a[0].shape[1]),  # heads averaged
]


def ablated(z, head, mean):
    out = z.clone()
    out[:, :, head] = mean
    return out


MISTAKES["mean-ablate"] = [
    lambda z, h: ablated(z, h, z[:, :, h].mean()),  # the bug: one number for all of D
    lambda z, h: ablated(z, h, z[:, :, h].mean(dim=0)),  # the mean over the batch only
    lambda z, h: z - z.mean(dim=(0, 1)) + z.mean(dim=(0, 1)) * 0,  # every head centred
    lambda z, h: ablated(z, h, 0.0),  # zero ablation
]


def settles(lens, answer, k, first=False, ties_against=False):
    above = (
        (lens >= lens[:, answer : answer + 1]).sum(1) - 1
        if ties_against
        else (lens > lens[:, answer : answer + 1]).sum(1)
    )
    inside = (above < k).tolist()
    if first:
        return next((layer for layer, ok in enumerate(inside) if ok), None)
    if not inside[-1]:
        return None
    layer = len(inside) - 1
    while layer > 0 and inside[layer - 1]:
        layer -= 1
    return layer


MISTAKES["settles-at"] = [
    lambda lens, a, k: settles(lens, a, k, first=True),  # the first layer in the top k, even if it drops out
    lambda lens, a, k: settles(lens, a, k, ties_against=True),  # a tie counted against the answer
    lambda lens, a, k: settles(lens, a, k) or 0,  # 0 instead of None
]
