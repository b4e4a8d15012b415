"""Tokenizers trained in milliseconds on a few English and Chinese sentences, for the token-level
task tests (tests/test_token_labels.py, tests/test_qa_windows.py): a SentencePiece model of 120
ids (XLM-R's kind), small enough that most words split into several pieces and a Chinese run
into multi-character pieces, with characters it has never seen (`<unk>`); and a cased WordPiece
`tokenizer.json` (mBERT's kind: `##` pieces, one token per Chinese character)."""

import pathlib

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers

from xlpretrain.data.tokenizer import HFTokenizer, Tokenizer, train_tokenizer

EN = (
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France, said Mr. Smith.",
    "New York City has eight million people.",
    "The capital of Germany is Berlin.",
    "Smith was born in London in 1898.",
    "The university was founded in the capital.",
    "People say the city is the largest in the country.",
    "Mr. Smith jumps over the fox in Paris.",
    "The largest university of the city is old.",
    "Berlin and Paris are capitals of countries in Europe.",
)
ZH = (
    "北京是中华人民共和国的首都。",
    "北京大学位于北京市海淀区，成立于1898年。",
    "上海是中国最大的城市。",
    "中国的首都是北京。",
    "北京大学是中国的大学。",
    "上海大学位于上海市。",
    "海淀区是北京市的一个区。",
    "中华人民共和国成立于1949年。",
    "北京和上海是中国的城市。",
    "大学位于城市的中心。",
)


def train(folder: pathlib.Path) -> Tokenizer:
    """The model, written into `folder`."""
    texts = {"en": list(EN) * 4, "zh": list(ZH) * 4}
    return train_tokenizer(texts, folder / "task.model", 120, character_coverage=1.0)


def wordpiece() -> HFTokenizer:
    """The WordPiece tokenizer (its vocabulary written out, as `tokenizers`' trainer is not
    deterministic): every character alone and as `##` piece, every English word but a few,
    which split into characters; its special tokens found by their BERT spellings."""
    split = pre_tokenizers.BertPreTokenizer()
    words = {w for line in EN for w, _ in split.pre_tokenize_str(line)}
    chars = sorted(set("".join(EN + ZH)) - {" "})
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = [*specials, *chars, *("##" + c for c in chars)]
    pieces += sorted(words - {"France", "jumps", "said", *chars})
    tokenizer = tokenizers.Tokenizer(
        models.WordPiece({piece: i for i, piece in enumerate(pieces)}, unk_token="[UNK]")
    )
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.add_special_tokens(specials)
    return HFTokenizer(tokenizer.to_str())
