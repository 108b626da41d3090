import os

import pytest
from hypothesis import settings

from course_lib.data import stdlib_docs_text
from course_lib.tokenization import gpt2_encoding, gpt2_tokenizer

# No timing-based failures on a shared machine, no example database left behind, and in CI
# the same examples every run (they were explored at 25,000 examples when written).
settings.register_profile("course", deadline=None, database=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("course")


@pytest.fixture(scope="session")
def corpus() -> str:
    return stdlib_docs_text()


@pytest.fixture(scope="session")
def tiktoken_gpt2():
    return gpt2_encoding()


@pytest.fixture(scope="session")
def course_gpt2():
    return gpt2_tokenizer()
