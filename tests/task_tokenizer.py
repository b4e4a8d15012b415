"""A SentencePiece model of 120 ids trained in a few milliseconds on a few English and Chinese
sentences, for the token-level task tests (tests/test_token_labels.py, tests/test_qa_windows.py):
small enough that most words split into several pieces and a Chinese run into multi-character
pieces, with characters it has never seen (`<unk>`)."""

import pathlib

from xlpretrain.data.tokenizer import Tokenizer, train_tokenizer

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
