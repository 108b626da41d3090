"""GPT-2's tokenizer offline: its 50,256 merge ranks ship in ``course_lib/assets`` (from the
``openai-whisper`` source distribution, MIT licence, see ``gpt2.tiktoken.LICENSE`` there), checked by
their SHA-256, so neither tiktoken's encoding nor the course's own encoder needs a download.
"""

from __future__ import annotations

import base64
import hashlib
from importlib import resources

from .bpe import GPT2_SPLIT_PATTERN, BPETokenizer, TokenizerFileError

ENDOFTEXT = "<|endoftext|>"  # GPT-2's one special token, its last id

GPT2_RANKS_FILE = "gpt2.tiktoken"
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_VOCAB_SIZE = 50257


def load_gpt2_ranks() -> dict[bytes, int]:
    """GPT-2's 50,256 mergeable tokens and their ranks (= ids), from the shipped file.

    The file is ``whisper/assets/gpt2.tiktoken`` from the ``openai-whisper`` source
    distribution (MIT licence); its SHA-256 is checked so a damaged copy fails loudly.
    """
    data = resources.files("course_lib").joinpath("assets", GPT2_RANKS_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != GPT2_RANKS_SHA256:
        raise TokenizerFileError(
            f"course_lib/assets/{GPT2_RANKS_FILE} has SHA-256 {digest}, expected "
            f"{GPT2_RANKS_SHA256}; reinstall course_lib to restore it"
        )
    ranks = {}
    for line in data.splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


def gpt2_encoding():
    """tiktoken's GPT-2 encoding (50,257 tokens), built from the shipped ranks.

    ``tiktoken.get_encoding("gpt2")`` downloads two files on first use; this gives the
    identical encoding without a network connection, every time.
    """
    import tiktoken

    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_SPLIT_PATTERN,
        mergeable_ranks=load_gpt2_ranks(),
        special_tokens={ENDOFTEXT: GPT2_VOCAB_SIZE - 1},
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )


def gpt2_tokenizer() -> BPETokenizer:
    """The course's own BPE encoder with GPT-2's vocabulary and merges (recovered from the
    shipped ranks): the same ids as tiktoken."""
    return BPETokenizer.from_ranks(load_gpt2_ranks(), {ENDOFTEXT: GPT2_VOCAB_SIZE - 1})
