"""Files on disk: downloads checked against a SHA-256, atomic replacement, extraction from a zip."""

import hashlib
import io
import zipfile

import pytest

from course_lib import files
from course_lib.files import DatasetUnavailableError, download


def test_download_verifies_and_caches(server, tmp_path):
    served, url = server
    payload = b"To be, or not to be\n" * 1000
    (served / "play.txt").write_bytes(payload)
    target = tmp_path / "cache" / "play.txt"
    sha = hashlib.sha256(payload).hexdigest()
    assert download(f"{url}/play.txt", target, sha) == target
    assert target.read_bytes() == payload
    (served / "play.txt").unlink()  # a second call must not touch the network
    assert download(f"{url}/play.txt", target, sha) == target
    assert list(target.parent.iterdir()) == [target]


def test_checksum_mismatch_leaves_no_file(server, tmp_path):
    served, url = server
    (served / "play.txt").write_bytes(b"tampered")
    target = tmp_path / "cache" / "play.txt"
    with pytest.raises(DatasetUnavailableError, match="expected " + "0" * 64):
        download(f"{url}/play.txt", target, "0" * 64)
    assert list(target.parent.iterdir()) == []


def test_offline_download_fails_with_advice(tmp_path):
    # Port 9 on localhost: nothing listens there, as when the network is down.
    target = tmp_path / "x.txt"
    with pytest.raises(DatasetUnavailableError, match="Are you offline.*load_corpus\\('stdlib-docs'\\)"):
        download("http://127.0.0.1:9/x.txt", target, "0" * 64, timeout=5)
    assert list(tmp_path.iterdir()) == []


def test_an_error_inside_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "notes.txt"
    files.write_atomically(path, "old ✓")
    with pytest.raises(RuntimeError, match="the disk is full"):
        with files.atomic_write(path) as out:
            out.write(b"half of the new")
            raise RuntimeError("the disk is full")
    assert path.read_text(encoding="utf-8") == "old ✓"  # the old file intact
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]  # no temporary left behind
    with files.atomic_write(path) as out:
        out.write(b"new")
    assert path.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_write_atomically_makes_the_folder_and_writes_text_as_utf8(tmp_path):
    path = files.write_atomically(tmp_path / "a" / "b.txt", "naïve")
    assert path == tmp_path / "a" / "b.txt" and path.read_bytes() == "naïve".encode("utf-8")
    assert files.write_atomically(path, b"\x00\xff").read_bytes() == b"\x00\xff"


def test_extract_member_checks_before_it_writes(tmp_path):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("data.txt", "hello")
    (tmp_path / "a.zip").write_bytes(archive.getvalue())
    good = hashlib.sha256(b"hello").hexdigest()
    target = tmp_path / "out" / "data.txt"
    with pytest.raises(DatasetUnavailableError, match="has no file 'missing.txt'"):
        files.extract_member(tmp_path / "a.zip", "missing.txt", target, good)
    with pytest.raises(DatasetUnavailableError, match="expected 0{64}; nothing was extracted"):
        files.extract_member(tmp_path / "a.zip", "data.txt", target, "0" * 64)
    assert not target.exists()
    assert files.extract_member(tmp_path / "a.zip", "data.txt", target, good) == target
    assert target.read_bytes() == b"hello" and files.sha256_file(target) == good
