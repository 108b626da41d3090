"""Tokenizers: text -> integer ids -> text.

Three tokenizers of increasing power, all with the same small interface
(``encode``, ``decode``, ``vocab_size``), in the order notebook 01 builds them:

- ``simple``           :class:`CharTokenizer` (one id per character seen in the training text) and
                       :class:`WordTokenizer` (one id per word, special tokens ``[PAD] [UNK] [BOS] [EOS]``)
- ``bpe_training``     the pair counts and the merge BPE is built from; :func:`train_bpe_naive`
                       (the textbook loop) and :func:`train_bpe` (fast, incremental, the same merges)
- ``bpe``              :class:`BPETokenizer`: byte-level byte-pair encoding with tiktoken's ids,
                       streaming encoding, its own small save format
- ``gpt2``             GPT-2's tokenizer offline: :func:`gpt2_encoding` (tiktoken's, without the
                       download) and :func:`gpt2_tokenizer` (the course's encoder with GPT-2's merges),
                       from the rank file that ships in ``course_lib/assets``
- ``tokenizer_files``  GPT-2 / Hugging Face ``vocab.json`` + ``merges.txt`` read and written; the
                       tokenizer stored inside a model file

Every name below can be imported from ``course_lib.tokenization`` itself.
"""

from .bpe import BPE_FILE_HEADER, GPT2_SPLIT_PATTERN, SMOLLM_SPLIT_PATTERN, BPETokenizer, TokenizerFileError
from .bpe_training import get_pair_counts, merge_pair, train_bpe, train_bpe_naive
from .gpt2 import ENDOFTEXT, GPT2_VOCAB_SIZE, gpt2_encoding, gpt2_tokenizer, load_gpt2_ranks
from .simple import BOS, EOS, PAD, UNK, WORD_PATTERN, WORD_SPECIALS, CharTokenizer, WordTokenizer
from .tokenizer_files import from_gpt2_text, load_gpt2_files, save_gpt2_files, tokenizer_from_dict, tokenizer_to_dict

__all__ = ["CharTokenizer", "WordTokenizer", "WORD_PATTERN", "PAD", "UNK", "BOS", "EOS", "WORD_SPECIALS"]
__all__ += ["get_pair_counts", "merge_pair", "train_bpe_naive", "train_bpe"]
__all__ += ["BPETokenizer", "TokenizerFileError", "GPT2_SPLIT_PATTERN", "SMOLLM_SPLIT_PATTERN", "BPE_FILE_HEADER"]
__all__ += ["ENDOFTEXT", "GPT2_VOCAB_SIZE", "load_gpt2_ranks", "gpt2_encoding", "gpt2_tokenizer"]
__all__ += ["load_gpt2_files", "save_gpt2_files", "from_gpt2_text", "tokenizer_to_dict", "tokenizer_from_dict"]
