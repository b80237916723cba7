"""Chat (vkq.llama.chat_template, Decoder.chat, `vkq chat`, `vkq generate
--chat`) and why a generation stops (GenerationStats.stop): templates
render in Jinja2's sandbox, their failures are one line; a conversation's
next turn feeds only its new tokens and gives the tokens of a fresh one;
the token limit, the context's end, a stop string (cut from the text and
the stream) and an end-of-turn token are said; the example model answers
"What is the capital of France?" about Paris."""
from __future__ import annotations

import io
import re
import sys

import pytest
from conftest import smollm2_or_skip

from vkq.commands.cli import main
from vkq.llama.chat_template import BUILTIN_TEMPLATES, chat_prompt_ids, render, template_source
from vkq.llama.decoding import GenerationStats
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel
from vkq.llama.model import LlamaFile
from vkq.llama.sampling import Sampling

CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Name a color."}]


def test_builtin_templates_render():
    assert render(BUILTIN_TEMPLATES["chatml"], "chatml", CONVERSATION) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nName a color.<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert render(BUILTIN_TEMPLATES["llama3"], "llama3", CONVERSATION[1:2], bos_token="<B>") == (
        "<B><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert render(BUILTIN_TEMPLATES["llama2"], "llama2", CONVERSATION, bos_token="<s>", eos_token="</s>") == (
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] Name a color. [/INST]")
    for name, source in BUILTIN_TEMPLATES.items():
        text = render(source, name, CONVERSATION, bos_token="<B>", eos_token="<E>")
        assert "Name a color." in text and "Hello!" in text, name
        assert render(source, name, CONVERSATION, add_generation_prompt=False) != text, name


def test_template_failures_are_one_line(tiny, tmp_path):
    file = LlamaFile(tiny)
    with pytest.raises(ValueError, match=r"^tiny.gguf has no chat template \(tokenizer.chat_template\): give "
                                         r"one with --chat-template NAME\|FILE \(built in: chatml, llama3, "):
        template_source(file)
    with pytest.raises(ValueError, match=r"^unknown chat template 'chatmlx': a built-in name \(chatml, "):
        template_source(file, "chatmlx")
    with pytest.raises(ValueError, match=r"^the chat template is not valid Jinja: .* \(line 1\)$"):
        render("{% for m in messages %}{{ m['content'] }", "the chat template", CONVERSATION)
    with pytest.raises(ValueError, match=r"^chat template llama2 refused the conversation: llama2 takes system"):
        render(BUILTIN_TEMPLATES["llama2"], "chat template llama2", [{"role": "tool", "content": "x"}])
    # The sandbox: no way out through Python's attributes.
    with pytest.raises(ValueError, match=r"^the chat template failed to render: SecurityError: "):
        render("{{ ''.__class__.__mro__[1].__subclasses__() }}", "the chat template", CONVERSATION)
    with pytest.raises(ValueError, match=r"^the chat template failed to render: TypeError: "):
        render("{{ messages[0]['content'] + 1 }}", "the chat template", CONVERSATION)
    with pytest.raises(ValueError, match=r'^messages\[1\]: a dictionary with a "role" and a "content" string'):
        chat_prompt_ids(file, [CONVERSATION[0], {"role": "user"}], "chatml")
    ids = chat_prompt_ids(file, CONVERSATION, "chatml")
    path = tmp_path / "mine.jinja"
    path.write_text(BUILTIN_TEMPLATES["chatml"], encoding="utf-8")
    assert template_source(file, path) == ("chat template mine.jinja", BUILTIN_TEMPLATES["chatml"])
    assert chat_prompt_ids(file, CONVERSATION, str(path)) == ids == chat_prompt_ids(file, CONVERSATION,
                                                                                    BUILTIN_TEMPLATES["chatml"])
    assert file.tokenizer.decode(ids, skip_special=False).endswith("Name a color.<|im_end|>\n<|im_start|>assistant\n")


def test_stop_reasons_in_words():
    s = GenerationStats("engine x", None, stop="eog", stop_detail="<|im_end|>")
    assert s.stop_reason == "an end-of-generation token (<|im_end|>)"
    assert s.summary().splitlines()[-1] == "stopped at an end-of-generation token (<|im_end|>); greedy"
    assert GenerationStats("x", None, stop="stop", stop_detail="\n\n").stop_reason == "a stop string ('\\n\\n')"


@pytest.fixture(scope="module")
def decoders(tiny):
    import vkq

    backend = vkq.Backend()
    host = LlamaModel(tiny, backend, "dmmv", ctx=200)
    graph = GpuLlama(None, backend, "dmmv", ctx=200, file=host.file, weights=host.matvecs, prompt_kernels="matvec")
    return host, graph


def test_why_it_stopped(decoders):
    host, graph = decoders
    for d in (host, graph):
        text, ids, st = d.generate("the theory", 7, stop_at_eos=False)
        assert (st.stop, st.stop_reason, len(ids)) == ("limit", "the token limit (7 tokens)", 7)
        n_prompt = len(d.tokenizer.encode("the theory"))
        _, ids, st = d.generate("the theory", -1, stop_at_eos=False)
        assert (st.stop, st.stop_reason) == ("context", "the context's end (200 positions)")
        assert len(ids) == 200 - n_prompt + 1 and d.n_past == 200
    full, _, _ = graph.generate("the theory", 24, stop_at_eos=False)
    stop = full[9:12]
    assert len(stop) == 3 and full.find(stop) >= 3
    pieces = []
    text, ids, st = graph.generate("the theory", 24, stop_at_eos=False, stop=["zzzz", stop], on_text=pieces.append)
    assert (st.stop, st.stop_detail) == ("stop", stop) and len(ids) < 24
    assert text == full[:full.find(stop)] == "".join(pieces)
    with pytest.raises(ValueError, match="stop strings must be non-empty text, got ''"):
        graph.generate("the theory", 4, stop=[""])


@pytest.mark.parametrize("engine,sampling", [("host", None), ("graph", None), ("graph", Sampling(temp=1.0, seed=2))],
                         ids=["host", "graph", "graph-sampled"])
def test_a_conversation_feeds_only_its_new_turn(decoders, engine, sampling):
    """The second turn keeps the first in the KV cache (n_cached) and
    chooses the tokens a fresh conversation of the same messages does
    (sampled: the same draws, each a hash of the seed and its position)."""
    d = decoders[0] if engine == "host" else decoders[1]
    messages = CONVERSATION[:2]
    reply, _, first = d.chat(messages, 8, template="chatml", sampling=sampling, reuse_cache=False)
    assert first.n_cached == 0 and first.stop in ("limit", "eog")
    messages = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    again, ids, second = d.chat(messages, 8, template="chatml", sampling=sampling)
    total = len(chat_prompt_ids(d.file, messages, "chatml"))
    assert second.n_cached >= first.n_prompt and second.n_prompt + second.n_cached == total
    fresh, fresh_ids, third = d.chat(messages, 8, template="chatml", reuse_cache=False, sampling=sampling)
    assert (fresh_ids, fresh) == (ids, again) and third.n_cached == 0
    _, _, long = d.chat(messages, 10_000, template="chatml", stop=["\x00"])
    assert long.stop in ("context", "eog")


def test_chat_command(tiny, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello there\n\nwhat next\n/exit\nnever read\n"))
    assert main(["chat", str(tiny), "--chat-template", "chatml", "-n", "5", "--temp", "0.7", "--seed", "3",
                 "-sys", "Be brief."]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2, out
    turns = [line for line in err.splitlines() if line.startswith("[")]
    assert len(turns) == 2 and all("stopped at the token limit (5 tokens)" in t for t in turns), err
    assert "temp 0.7, top-k 40, top-p 0.95, min-p 0.05, seed 3" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert main(["chat", str(tiny)]) == 2
    assert capsys.readouterr().err.strip() == (
        "vkq chat: error: tiny.gguf has no chat template (tokenizer.chat_template): give one with --chat-template "
        "NAME|FILE (built in: chatml, llama3, llama2, gemma, phi3, zephyr)")


def test_generate_prompt_file_and_stop(tiny, tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("the theory that", encoding="utf-8")
    assert main(["generate", str(tiny), "-f", str(prompt), "-n", "6", "--ignore-eos"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("the theory that") and err.splitlines()[-1] == "stopped at the token limit (6 tokens); greedy"
    with pytest.raises(SystemExit):
        main(["generate", str(tiny), "-f", str(prompt), "-p", "x"])
    assert capsys.readouterr().err.strip() == ("vkq generate: error: argument -p/--prompt: not allowed with argument "
                                               "-f/--file (`vkq generate --help` lists the options)")
    assert main(["generate", str(tiny), "-f", str(tmp_path / "none.txt")]) == 2
    assert re.match(r"vkq generate: error: -f .*none.txt: cannot read it", capsys.readouterr().err)
    assert main(["generate", str(tiny), "-p", "the", "--system", "x"]) == 2
    assert "they need --chat" in capsys.readouterr().err


def test_example_model_answers_about_paris(capsys):
    smol = smollm2_or_skip()
    assert main(["generate", str(smol), "--chat", "-p", "What is the capital of France?", "-n", "24"]) == 0
    out, err = capsys.readouterr()
    assert "Paris" in out, out
    assert err.splitlines()[-1] == "stopped at an end-of-generation token (<|im_end|>); greedy", err
