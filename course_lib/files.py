"""Files on disk: atomic replacement, checksums, and downloads into a cache folder.

Every file course_lib writes goes through :func:`atomic_write`: the bytes go to a temporary
file in the same folder, which is renamed over the target only once it is complete, so a
crash or an interrupted download leaves the previous file (or none), never half of one.
Public data sets are downloaded once into ``~/.cache/course_lib`` (or ``$COURSE_DATA_DIR``),
checked against a SHA-256, and fail with an error saying what to do when offline.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CACHE_ENV = "COURSE_DATA_DIR"


class DatasetUnavailableError(RuntimeError):
    """A file could not be downloaded or did not match its checksum."""


@dataclass(frozen=True)
class RemoteFile:
    """A public file: where it lives, what it must hash to, and what it is."""

    url: str
    sha256: str
    filename: str
    description: str


@contextmanager
def atomic_write(path: str | Path) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for writing bytes; on a clean exit it replaces
    ``path`` in one rename (readers see the old file or the new one), on an error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_atomically(path: str | Path, data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` (text is written as UTF-8) through :func:`atomic_write`."""
    with atomic_write(path) as out:
        out.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "course_lib"))


def cache_folder(cache_dir: str | Path | None) -> Path:
    """``cache_dir`` if given, else the default cache folder."""
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, path: str | Path, sha256: str | None, timeout: float = 30.0) -> Path:
    """Download ``url`` to ``path`` unless a verified copy is already there.

    The file is renamed into place only after the checksum matches, so an interrupted or
    corrupted download never leaves a file that looks complete. ``sha256=None`` (for files
    whose publisher gives no checksum) skips the check but keeps the atomic write.
    """
    path = Path(path)
    if path.exists() and (sha256 is None or sha256_file(path) == sha256):
        return path
    try:
        with atomic_write(path) as out, urllib.request.urlopen(url, timeout=timeout) as response:
            digest = hashlib.sha256()
            for block in iter(lambda: response.read(1 << 16), b""):
                digest.update(block)
                out.write(block)
            if sha256 is not None and digest.hexdigest() != sha256:
                raise DatasetUnavailableError(
                    f"the file downloaded from {url} has SHA-256 {digest.hexdigest()}, expected "
                    f"{sha256}; it was discarded. The source may have changed: download it by "
                    f"hand, check it, and place it at {path}"
                )
    except (urllib.error.URLError, OSError) as err:
        raise DatasetUnavailableError(
            f"could not download {url} ({err}). Are you offline? Place the file at {path} by "
            f"hand, or use the offline corpus load_corpus('stdlib-docs')"
        ) from err
    return path


def fetch(source: RemoteFile, cache_dir: str | Path | None = None) -> Path:
    """The verified local copy of ``source`` in the cache folder, downloaded the first time."""
    return download(source.url, cache_folder(cache_dir) / source.filename, source.sha256)


def extract_member(archive: str | Path, member: str, path: str | Path, sha256: str) -> Path:
    """Extract one file of a zip archive to ``path``, checked against ``sha256`` and renamed
    into place only when complete (as :func:`download` does)."""
    import zipfile

    path = Path(path)
    if path.exists() and sha256_file(path) == sha256:
        return path
    with zipfile.ZipFile(archive) as z:
        try:
            data = z.read(member)
        except KeyError:
            raise DatasetUnavailableError(f"{archive} has no file {member!r}; it holds {z.namelist()[:10]}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise DatasetUnavailableError(
            f"{member} in {archive} has SHA-256 {digest}, expected {sha256}; nothing was extracted"
        )
    with atomic_write(path) as out:
        out.write(data)
    return path
