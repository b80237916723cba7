"""tests/file_cache.py: a file is made once per key and reused; a changed
key's old file goes once no run has used it for STALE_DAYS."""
from __future__ import annotations

import os
import time

import file_cache


def make_with(text: str):
    return lambda path: path.write_text(text)


def backdate(path, days: float) -> None:
    t = time.time() - days * 86400
    os.utime(path, (t, t))


def test_made_once_then_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("VKQ_TEST_CACHE", str(tmp_path))
    calls = []
    a = file_cache.cached_file("run", "key 1", lambda p: (calls.append(p), p.write_text("1")))
    b = file_cache.cached_file("run", "key 1", lambda p: (calls.append(p), p.write_text("2")))
    assert a == b and a.read_text() == "1" and len(calls) == 1
    assert not list(tmp_path.glob("*.part"))


def test_stale_files_of_the_name_go(tmp_path, monkeypatch):
    monkeypatch.setenv("VKQ_TEST_CACHE", str(tmp_path))
    old = file_cache.cached_file("run", "key 1", make_with("old"))
    recent = file_cache.cached_file("run", "key 2", make_with("recent"))
    other = file_cache.cached_file("other", "key 1", make_with("other name"))
    for path in (old, recent, other):
        backdate(path, file_cache.STALE_DAYS + 1)
    file_cache.cached_file("run", "key 2", make_with("unused"))  # a hit: key 2's file used now
    new = file_cache.cached_file("run", "key 3", make_with("new"))
    assert not old.exists()  # unused past STALE_DAYS, same name: gone
    assert recent.read_text() == "recent"  # used by the hit above: kept
    assert other.exists() and new.read_text() == "new"  # another name is not this one's to remove
