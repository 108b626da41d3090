"""Make the data the course's numbers are computed from, once, from a Python: the shipped asset
``course_lib/assets/python_docs.json.gz``.

The default corpus (the language reference topics of ``pydoc_data.topics``) and the docstrings
behind chapters 10-12's tasks differ between Python versions (465,984 characters of topics on
3.11, 498,510 on 3.12). The course ships the text of **Python 3.11.7**, so that every Python
computes the same numbers and the stored outputs compare strictly everywhere:

    python scripts/make_data_assets.py            # rewrite the asset from the running Python
    python scripts/make_data_assets.py --check    # exit 1 if the asset differs from what it makes

``tests/test_data.py`` checks that the shipped file is exactly what this script makes on the
Python it was made with (the version is recorded inside it). The text is the Python Software
Foundation's, under the PSF License Agreement: see ``python_docs.json.gz.LICENSE``.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import inspect
import io
import json
import platform
import re
import sys

from course_lib.data import PYTHON_DOCS
from course_lib.tasks import DOCSTRING_AREAS, first_sentence


def reference_topics() -> list[tuple[str, str]]:
    """``(topic, text)`` of the running Python's reference topics (``help("with")`` and friends)."""
    from pydoc_data.topics import topics

    return [(key, topics[key]) for key in sorted(topics)]


def _public_objects(module) -> list:
    """Public functions and classes defined in ``module`` (not re-exported from elsewhere:
    ``statistics.reduce`` is ``functools.reduce``), and the public methods of those classes."""
    found = []
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
            continue
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        found.append(obj)
        if inspect.isclass(obj):
            found += [
                member
                for member_name, member in sorted(vars(obj).items())
                if not member_name.startswith("_")
                and (inspect.isfunction(member) or inspect.ismethoddescriptor(member))
            ]
    return found


def docstring_facts() -> list[tuple[str, str, int]]:
    """``(qualified name, first sentence, area)`` for every public function, class and method of
    the modules in ``DOCSTRING_AREAS`` whose docstring starts with a real sentence, as the running
    Python has them (fragments of fewer than four words and bare signatures are dropped)."""
    facts = []
    for label, modules in enumerate(DOCSTRING_AREAS.values()):
        for module_name in modules:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            for obj in _public_objects(module):
                doc = obj.__doc__ if isinstance(obj, type) else getattr(obj, "__doc__", None)
                if not isinstance(doc, str) or not doc.strip():
                    continue
                sentence = first_sentence(doc)
                if len(sentence.split()) < 4 or len(sentence) > 300 or re.match(r"^[\w.]+\(.*\)\s*(->|$)", sentence):
                    continue
                qualname = getattr(obj, "__qualname__", obj.__name__)
                name = f"{module_name}.{obj.__name__ if '<locals>' in qualname else qualname}"
                facts.append((name if isinstance(obj, type) else name + "()", sentence, label))
    return facts


def asset_bytes() -> bytes:
    """The asset as this Python makes it: gzip'd JSON, byte-for-byte reproducible (no timestamp)."""
    document = {
        "python": platform.python_version(),
        "topics": reference_topics(),
        "docstrings": docstring_facts(),
    }
    text = json.dumps(document, ensure_ascii=False, indent=0, separators=(",", ":")) + "\n"
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as f:
        f.write(text.encode("utf-8"))
    return out.getvalue()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped asset, write nothing")
    args = parser.parse_args(argv)
    made = asset_bytes()
    if args.check:
        same = PYTHON_DOCS.read_bytes() == made
        print(f"{PYTHON_DOCS.name}: {'identical' if same else 'DIFFERS'} (Python {platform.python_version()})")
        return 0 if same else 1
    PYTHON_DOCS.write_bytes(made)
    print(f"wrote {PYTHON_DOCS} ({len(made):,} bytes) from Python {platform.python_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
