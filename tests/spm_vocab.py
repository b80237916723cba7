"""A small SentencePiece vocabulary made here, as GGUF tokenizer metadata.

`train()` has the `sentencepiece` package train a BPE model as Llama's was
made (no normalization, extra spaces kept, digits split, byte fallback), on
the fixed text below, in a few hundredths of a second. `gguf_tokenizer(sp)`
gives its tokenizer.ggml.* metadata as llama.cpp's converter writes a
SentencePiece vocabulary (convert_hf_to_gguf's sentencepiece vocab): every
piece with its score and type (UNKNOWN, CONTROL, BYTE or NORMAL; a
user-defined symbol USER_DEFINED, as the converter marks added tokens),
the model "llama", and the BOS/EOS/UNK ids; tiny_llama.write_gguf takes it.
`whole_characters(metadata)` leaves out the byte tokens past ASCII, so that
every token is whole UTF-8 (llama-server answers 500 where the text a random
model generates is not).

`MISTRAL_MODELS` are real vocabularies: Mistral's SentencePiece models that
the `mistral-common` package ships (v1: Mistral 7B v0.1's 32000 pieces, made
as Llama 2's; v3 and v7: 32768 with some 750 control tokens), where it is
installed (`mistral_models()`, found without importing the package).
"""
from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import gguf

# Training text: prose, code with indentation (pieces of several spaces), numbers and punctuation.
TEXT = """\
The river rose through the night, and by morning the lower fields were under water.
Farmers moved their animals to the ridge while the children watched from the bridge.
The council met to discuss the budget for the new library and the repair of three schools.
Photosynthesis turns light into chemical energy: carbon dioxide and water become sugar.
def mean(values):
    if not values:
        return 0.0
    return sum(values) / len(values)
In 1969 the crew landed on the Moon and returned on July 24, after eight days in space.
She asked whether the train left at 7:45 or 8:15; the clerk said it had been cancelled.
A good recipe for bread needs flour, water, salt and yeast, and above all patience.
The quick brown fox jumps over the lazy dog. 2 + 2 = 4, 12 * 12 = 144.
Dear Sir, thank you for your letter; I am pleased to confirm our meeting on Tuesday at noon.
"""
# "<sep>!" holds "<sep>": the longer is cut out first; "日~" is the longer in UTF-8 bytes (4), "~~~" in characters
USER_DEFINED_SYMBOLS = ("<sep>", "<sep>!", "日~", "~~~")
VOCAB_SIZE = 360
MISTRAL_MODELS = ("tokenizer.model.v1", "mistral_instruct_tokenizer_240323.model.v3",
                  "mistral_instruct_tokenizer_241114.model.v7")


def train(text: str = TEXT, vocab_size: int = VOCAB_SIZE):
    """A sentencepiece.SentencePieceProcessor trained on text."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text.splitlines()), model_writer=model, vocab_size=vocab_size, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
        allow_whitespace_only_pieces=True, user_defined_symbols=list(USER_DEFINED_SYMBOLS), hard_vocab_limit=False,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def mistral_models() -> dict[str, Path]:
    """MISTRAL_MODELS that the installed mistral-common package has, by name."""
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        return {}
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    return {name: data / name for name in MISTRAL_MODELS if (data / name).is_file()}


def load(path: Path):
    """The sentencepiece.SentencePieceProcessor of a model file."""
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(path))


def gguf_tokenizer(sp) -> dict:
    """tokenizer.ggml.* metadata of sp, as (value, gguf.GGUFValueType) items for tiny_llama.write_gguf."""
    T, V = gguf.TokenType, gguf.GGUFValueType
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        piece = sp.id_to_piece(i)
        kind = (T.UNKNOWN if sp.is_unknown(i) else T.CONTROL if sp.is_control(i) else T.UNUSED if sp.is_unused(i)
                else T.BYTE if sp.is_byte(i) else T.USER_DEFINED if piece in USER_DEFINED_SYMBOLS else T.NORMAL)
        tokens.append(piece)
        scores.append(sp.get_score(i))
        types.append(int(kind))
    return {
        "tokenizer.ggml.model": ("llama", V.STRING), "tokenizer.ggml.pre": ("default", V.STRING),
        "tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING), "tokenizer.ggml.scores": (scores, V.ARRAY, V.FLOAT32),
        "tokenizer.ggml.token_type": (types, V.ARRAY, V.INT32),
        "tokenizer.ggml.bos_token_id": (sp.bos_id(), V.UINT32), "tokenizer.ggml.eos_token_id": (sp.eos_id(), V.UINT32),
        "tokenizer.ggml.unknown_token_id": (sp.unk_id(), V.UINT32),
    }


def whole_characters(metadata: dict) -> dict:
    """metadata (gguf_tokenizer's) without the byte tokens <0x80>..<0xFF>:
    every token's text whole UTF-8 on its own, as llama-server's /completion
    needs of the text it returns (a byte of a character alone is not). The
    ids after them move down; ASCII outside the vocabulary still falls back
    to its byte token."""
    tokens, scores, types = (metadata[f"tokenizer.ggml.{k}"][0] for k in ("tokens", "scores", "token_type"))
    keep = [i for i, (t, ty) in enumerate(zip(tokens, types))
            if not (ty == gguf.TokenType.BYTE and int(t[3:5], 16) >= 0x80)]
    ids = {old: new for new, old in enumerate(keep)}
    V = gguf.GGUFValueType
    out = dict(metadata)
    for key, values, kind in (("tokens", tokens, V.STRING), ("scores", scores, V.FLOAT32),
                              ("token_type", types, V.INT32)):
        out[f"tokenizer.ggml.{key}"] = ([values[i] for i in keep], V.ARRAY, kind)
    for which in ("bos", "eos", "unknown"):
        key = f"tokenizer.ggml.{which}_token_id"
        out[key] = (ids[metadata[key][0]], V.UINT32)
    return out
