"""course_lib: the tested building blocks of *Transformers from Scratch*.

Each notebook builds an idea by hand, then imports the clean version from here and
checks that the two agree. One module per idea:

- ``runtime``       device choice, seeding, thread count and the training budget
- ``tokenization``  character, word and byte-level BPE tokenizers; GPT-2's encoding offline
- ``data``          corpora (offline default, cached downloads), splits, sliding windows
- ``ngram``         count-based n-gram language models, the first baseline
- ``plotting``      the figures and token colourings the notebooks show
- ``widgets``       interactive explorers (ipywidgets)
- ``exercises``     self-checks for the exercises at the end of each notebook
"""

__version__ = "0.1.0"
