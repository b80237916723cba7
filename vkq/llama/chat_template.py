"""Chat templates: a conversation rendered as the text a chat model was
trained on, by the Jinja template of its GGUF file (tokenizer.chat_template)
or a built-in one, in Jinja2's sandbox (ImmutableSandboxedEnvironment, as
the Python ecosystem renders these templates: trim_blocks, lstrip_blocks,
`raise_exception`, `strftime_now`), with the model's BOS and EOS texts and
add_generation_prompt.

A model without a template, an unknown template name, a template that is
no Jinja or fails to render (its own raise_exception included): one line
(ValueError) that says which.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

# The formats llama.cpp's users meet most, by the names llama.cpp's --chat-template gives them.
BUILTIN_TEMPLATES = {
    "chatml": (
        "{%- for message in messages -%}"
        "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"),
    "llama3": (
        "{{- bos_token -}}"
        "{%- for message in messages -%}"
        "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim"
        " + '<|eot_id|>' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif -%}"),
    "llama2": (
        "{%- if messages and messages[0]['role'] == 'system' -%}"
        "{%- set system = messages[0]['content'] -%}{%- set turns = messages[1:] -%}"
        "{%- else -%}{%- set system = '' -%}{%- set turns = messages -%}{%- endif -%}"
        "{%- for message in turns -%}"
        "{%- if message['role'] == 'user' -%}"
        "{{ bos_token + '[INST] ' }}"
        "{%- if loop.first and system -%}{{ '<<SYS>>\n' + system + '\n<</SYS>>\n\n' }}{%- endif -%}"
        "{{ message['content'] | trim + ' [/INST]' }}"
        "{%- elif message['role'] == 'assistant' -%}{{ ' ' + message['content'] | trim + ' ' + eos_token }}"
        "{%- else -%}{{ raise_exception('llama2 takes system (first), user and assistant messages') }}"
        "{%- endif -%}"
        "{%- endfor -%}"),
    "gemma": (
        "{{- bos_token -}}"
        "{%- for message in messages -%}"
        "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
        "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"),
    "phi3": (
        "{%- for message in messages -%}"
        "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}"),
    "zephyr": (
        "{%- for message in messages -%}"
        "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}"),
}


def _names() -> str:
    return ", ".join(BUILTIN_TEMPLATES)


def template_source(file, template: str | Path | None = None) -> tuple[str, str]:
    """(what the template is, its Jinja text): `template` (a built-in name,
    a file of Jinja text, or Jinja text itself), else the model's own."""
    if template is None:
        source = getattr(file, "chat_template", None)
        if not source:
            raise ValueError(f"{file.path.name} has no chat template (tokenizer.chat_template): give one with "
                             f"--chat-template NAME|FILE (built in: {_names()})")
        return f"{file.path.name}'s chat template", source
    text = str(template)
    if text in BUILTIN_TEMPLATES:
        return f"chat template {text}", BUILTIN_TEMPLATES[text]
    if "{{" in text or "{%" in text:
        return "the chat template", text
    path = Path(text)
    if path.is_file():
        try:
            return f"chat template {path.name}", path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"chat template {path}: cannot read it ({e})") from None
    raise ValueError(f"unknown chat template {text!r}: a built-in name ({_names()}) or a file of Jinja text")


def check_messages(messages) -> list[dict]:
    """A conversation: a list of {"role": ..., "content": text}, checked in one line."""
    if isinstance(messages, (str, bytes, dict)) or not hasattr(messages, "__iter__"):
        raise ValueError('messages: a list of {"role": ..., "content": ...} dictionaries, got '
                         f"{type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f'messages[{i}]: a dictionary with a "role" and a "content" string, got {m!r}')
        out.append(dict(m))
    if not out:
        raise ValueError("messages: the conversation is empty")
    return out


def _raise(message):
    raise _TemplateRaised(str(message))


class _TemplateRaised(Exception):
    """A template's own raise_exception."""


def render(source: str, what: str, messages, *, bos_token: str = "", eos_token: str = "",
           add_generation_prompt: bool = True) -> str:
    """The conversation as the template renders it, in Jinja2's sandbox."""
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:  # (a dependency of vkq's: an environment that lost it)
        raise ValueError("chat templates are rendered by the jinja2 package, which is not installed: "
                         "pip install jinja2") from None

    messages = check_messages(messages)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        compiled = env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"{what} is not valid Jinja: {e.message} (line {e.lineno})") from None
    try:
        return compiled.render(messages=messages, bos_token=bos_token, eos_token=eos_token,
                               add_generation_prompt=add_generation_prompt)
    except _TemplateRaised as e:
        raise ValueError(f"{what} refused the conversation: {e}") from None
    except Exception as e:  # noqa: BLE001 - any error of the template's code: named, in one line
        raise ValueError(f"{what} failed to render: {type(e).__name__}: {e}") from None


def special_text(tokenizer, ident: int | None) -> str:
    """A special token's text (BOS, EOS), "" where the model has none."""
    return "" if ident is None else tokenizer.decode([ident], skip_special=False)


def chat_prompt_ids(file, messages, template: str | Path | None = None) -> list[int]:
    """The token ids of the conversation rendered with the generation prompt:
    the template's text tokenized with its special tokens, and BOS first
    where the model adds one and the template did not write it."""
    what, source = template_source(file, template)
    tok = file.tokenizer
    text = render(source, what, messages, bos_token=special_text(tok, tok.bos_id),
                  eos_token=special_text(tok, tok.eos_id))
    ids = tok.encode(text, add_special=False)
    if tok.add_bos and (not ids or ids[0] != tok.bos_id):
        ids = [tok.bos_id] + ids
    if not ids:
        raise ValueError(f"{what} rendered the conversation as no text")
    return ids
