"""llama.cpp's outputs kept as data (tests/llama_cpp_reference.py): a record
stands in for llama.cpp only for the file it was made from, a missing or
stale one fails naming the command that makes it again, and where llama.cpp
runs its answer must equal the record. Then the data in the repository:
every record says where it came from.
"""
from __future__ import annotations

import json

import pytest

import llama_cpp_reference
from llama_cpp_reference import Answers, recorded


@pytest.fixture
def data(tmp_path, monkeypatch):
    """An empty data folder, and a file to ask about."""
    monkeypatch.setattr(llama_cpp_reference, "DATA", tmp_path / "data")
    monkeypatch.delenv("VKQ_RECORD_LLAMA_CPP", raising=False)
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF one file")
    return path


def write_run(path, **change):
    run = {"file_sha256": llama_cpp_reference._sha256(path), "file_bytes": 13, "prompt_ids": [1, 2], "n_tokens": 3,
           "tokens": [7, 8, 9]} | change
    llama_cpp_reference._write("test_x", {"runs": {"case": run}})


def test_a_record_stands_for_its_file_alone(data):
    with pytest.raises(pytest.fail.Exception, match=r"test_x\.json: llama.cpp's tokens for case: none recorded\. "
                                                    r"Record them where llama-server runs: VKQ_RECORD_LLAMA_CPP=1 "
                                                    r"python -m pytest -m slow -p no:randomly tests/test_x\.py"):
        recorded("test_x", "case", data, [1, 2], 3)
    write_run(data)
    assert recorded("test_x", "case", data, [1, 2], 3) == [7, 8, 9]
    with pytest.raises(pytest.fail.Exception, match="recorded for another prompt or count"):
        recorded("test_x", "case", data, [1, 2], 4)
    data.write_bytes(b"GGUF another file")
    with pytest.raises(pytest.fail.Exception, match=r"recorded for another file \(sha256 "):
        recorded("test_x", "case", data, [1, 2], 3)


def test_answers_checked_where_llama_cpp_runs(data, monkeypatch):
    monkeypatch.setenv("VKQ_RECORD_LLAMA_CPP", "1")
    a = Answers("vocab", data, True, "a file")
    assert a.answer("tokenize", "11 hi", lambda: [1, 5]) == [1, 5]
    a.close()
    monkeypatch.delenv("VKQ_RECORD_LLAMA_CPP")
    assert Answers("vocab", data, False, "a file").answer("tokenize", "11 hi", lambda: 1 / 0) == [1, 5]
    assert Answers("vocab", data, True, "a file").answer("tokenize", "11 hi", lambda: [1, 5]) == [1, 5]
    with pytest.raises(AssertionError, match=r"llama.cpp's tokenize of '11 hi' on a file is \[1, 6\], the data "
                                             r"\[1, 5\]: record the answers again"):
        Answers("vocab", data, True, "a file").answer("tokenize", "11 hi", lambda: [1, 6])
    with pytest.raises(pytest.fail.Exception, match=r"vocab\.json has no answer of llama.cpp's tokenize to '11 ho' "
                                                    r"on a file .*: VKQ_RECORD_LLAMA_CPP=1 python -m pytest"):
        Answers("vocab", data, False, "a file").answer("tokenize", "11 ho", lambda: [1, 7])


def test_the_data_says_where_it_came_from():
    files = sorted(llama_cpp_reference.DATA.glob("*.json"))
    assert {f.stem for f in files} >= {"test_qwen", "test_spm_moe", "test_llama_moe_smollm2", "test_model_file",
                                       "vocab", "type_mixes"}
    for f in files:
        data = json.loads(f.read_text())
        assert data["llama.cpp"].startswith("b10434 (commit 7e4c0a9)") and "VKQ_RECORD_LLAMA_CPP=1" in data["command"]
        for run in data.get("runs", {}).values():
            assert len(run["tokens"]) == run["n_tokens"] and len(run["file_sha256"]) == 64 and run["device"]
