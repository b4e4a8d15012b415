"""Tests of the SentencePiece wrapper: XLM-R's id layout (checked against Hugging Face's
conversion rules), multilingual round trips, pickling, batch encoding, language-balanced
training samples and clear vocabulary-size errors. Models are trained on CLDR names that
babel ships, in eight languages and six scripts."""

import pickle

import numpy as np
import pytest
import sentencepiece as spm
from babel import Locale

from xlpretrain.data.tokenizer import Tokenizer, balanced_sample, train_tokenizer

LANGUAGES = ("en", "de", "el", "ru", "ar", "hi", "zh", "ja")
VOCAB_SIZE = 1000  # the CJK characters alone need ~600 ids


@pytest.fixture(scope="module")
def texts() -> dict[str, list[str]]:
    """Territory and language names: real text, ~900 short lines per language."""
    return {
        lang: sorted(Locale(lang).territories.values()) + sorted(Locale(lang).languages.values())
        for lang in LANGUAGES
    }


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def trained(request, texts, tmp_path_factory) -> tuple[Tokenizer, spm.SentencePieceProcessor]:
    """A model of each type (XLM-R's own is BPE) and the raw SentencePiece view of it."""
    path = tmp_path_factory.mktemp("tok") / "model.model"
    tok = train_tokenizer(texts, path, VOCAB_SIZE, model_type=request.param, character_coverage=1.0)
    return tok, spm.SentencePieceProcessor(model_file=str(path))


def sentences(lang: str) -> str:
    """A multi-word sentence of CLDR names in ``lang``'s own script."""
    loc = Locale(lang)
    names = [loc.territories[t] for t in ("DE", "FR", "GR", "EG", "IN", "CN", "JP", "RU")]
    return " ".join(names)


def test_id_layout(trained):
    tok, sp = trained
    assert tok.vocab_size == VOCAB_SIZE == sp.GetPieceSize() + 2
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    assert tok.mask_id == VOCAB_SIZE - 1
    assert tok.special_ids().tolist() == [0, 1, 2, 3, VOCAB_SIZE - 1]
    assert tok.special_ids().dtype == np.int32
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    assert pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and pieces[-1] == "<mask>"
    assert pieces[4:-1] == [sp.IdToPiece(i) for i in range(3, sp.GetPieceSize())]
    with pytest.raises(IndexError):
        tok.id_to_piece(VOCAB_SIZE)


def test_matches_hugging_face_xlmr_conversion(trained):
    """Hugging Face's XLMRobertaTokenizer rules, spelled out: the ids of XLM-R checkpoints."""
    tok, sp = trained
    fairseq_tokens_to_ids = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    fairseq_tokens_to_ids["<mask>"] = len(sp) + 1  # fairseq_offset = 1

    def convert_token_to_id(token: str) -> int:
        if token in fairseq_tokens_to_ids:
            return fairseq_tokens_to_ids[token]
        spm_id = sp.PieceToId(token)
        return spm_id + 1 if spm_id else fairseq_tokens_to_ids["<unk>"]

    assert tok.vocab_size == len(sp) + 1 + 1
    assert tok.mask_id == fairseq_tokens_to_ids["<mask>"]
    for text in [sentences(lang) for lang in LANGUAGES] + ["Deutschland 🙂 ✈ 𓀀"]:
        expected = [convert_token_to_id(p) for p in sp.EncodeAsPieces(text)]
        assert tok.encode(text).tolist() == expected
    assert tok.unk_id == 3 and tok.unk_id in tok.encode("🙂 𓀀").tolist()


def test_encode_decode_round_trip(trained):
    tok, _ = trained
    for lang in LANGUAGES:
        text = sentences(lang)
        ids = tok.encode(text)
        assert ids.dtype == np.int32 and ids.ndim == 1 and len(ids) > 0
        assert ids.min() > tok.unk_id and ids.max() < tok.mask_id
        assert tok.decode(ids) == text
        assert tok.decode(ids.tolist()) == text
    assert tok.encode("").shape == (0,)


def test_decode_skips_special_ids(trained):
    tok, _ = trained
    text = sentences("el")
    ids = tok.encode(text).tolist()
    assert tok.decode([0, *ids[:2], tok.mask_id, 3, *ids[2:], 2, 1, 1]) == text
    with pytest.raises(ValueError, match="token ids"):
        tok.decode([tok.vocab_size])


def test_encode_batch_equals_encode(trained, texts):
    tok, _ = trained
    batch = [sentences(lang) for lang in LANGUAGES] + texts["ar"][:50] + ["", "🙂"]
    expected = [tok.encode(t).tolist() for t in batch]
    assert [ids.tolist() for ids in tok.encode_batch(batch)] == expected
    assert [ids.tolist() for ids in tok.encode_batch(batch, num_threads=1)] == expected
    assert all(ids.dtype == np.int32 for ids in tok.encode_batch(batch))
    assert tok.encode_batch([]) == []


def test_pickle_round_trip(trained):
    tok, _ = trained
    clone = pickle.loads(pickle.dumps(tok))
    assert clone.vocab_size == tok.vocab_size and clone.mask_id == tok.mask_id
    text = sentences("hi") + " " + sentences("zh")
    assert clone.encode(text).tolist() == tok.encode(text).tolist()
    assert clone.decode(clone.encode(text)) == text


def test_save_and_load(trained, tmp_path):
    tok, _ = trained
    path = tmp_path / "sub" / "copy.model"
    tok.save(path)
    loaded = Tokenizer.load(path)
    loaded.save(tmp_path / "again.model")
    assert (tmp_path / "again.model").read_bytes() == path.read_bytes()
    text = sentences("ru")
    assert loaded.encode(text).tolist() == tok.encode(text).tolist()


def test_rejects_a_model_with_another_special_layout(texts, tmp_path):
    prefix = tmp_path / "other"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts["en"]),
        model_prefix=str(prefix),
        vocab_size=200,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="unk/bos/eos at ids 0/1/2"):
        Tokenizer.load(f"{prefix}.model")


def test_balanced_sample_caps_every_language():
    corpus = {
        "big": [f"big {i}" for i in range(1000)],
        "mid": [f"mid {i}" for i in range(300)] + ["", "   "],  # blanks never count
        "small": [f"small {i}" for i in range(100)],
    }

    def per_language(sample: list[str]) -> dict[str, int]:
        return {lang: sum(s.split()[0] == lang for s in sample) for lang in corpus}

    # A language with 10x the text gets no more than the others.
    assert per_language(balanced_sample(corpus, 100)) == {"big": 100, "mid": 100, "small": 100}
    # Default cap: the median language size; smaller languages give all they have.
    assert per_language(balanced_sample(corpus)) == {"big": 300, "mid": 300, "small": 100}

    sample = balanced_sample(corpus, 100, seed=0)
    assert sample == balanced_sample(corpus, 100, seed=0)
    assert sample != balanced_sample(corpus, 100, seed=1)
    big = [s for s in sample if s.startswith("big")]
    assert big == sorted(big, key=lambda s: int(s.split()[1]))  # corpus order kept
    assert len(set(big)) == 100 and set(big) <= set(corpus["big"])
    # A language's draw does not depend on which other languages are present.
    alone = balanced_sample({"big": corpus["big"]}, 100, seed=0)
    assert alone == big


def test_train_tokenizer_samples_balanced(texts, tmp_path, monkeypatch):
    """train_tokenizer feeds SentencePiece the balanced sample, not the raw corpus."""
    seen: list[str] = []
    original = spm.SentencePieceTrainer.train

    def spy(**kwargs):
        seen.extend(kwargs["sentence_iterator"])
        return original(**{**kwargs, "sentence_iterator": iter(seen)})

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", spy)
    corpus = {"en": texts["en"] * 10, "el": texts["el"]}  # scripts apart: easy to count
    train_tokenizer(corpus, tmp_path / "m.model", 300, sentences_per_language=200)
    greek = set(texts["el"])
    assert len(seen) == 400 and sum(s in greek for s in seen) == 200


def test_vocab_size_errors(texts, tmp_path):
    path = tmp_path / "m.model"
    with pytest.raises(ValueError, match=r"vocab_size=100000 is too large .* at most vocab_size="):
        train_tokenizer({"en": texts["en"]}, path, 100_000)
    with pytest.raises(ValueError, match=r"vocab_size=300 is too small .* vocab_size >= \d+"):
        train_tokenizer({"zh": texts["zh"], "ja": texts["ja"]}, path, 300)
    with pytest.raises(ValueError, match="non-blank"):
        train_tokenizer({"en": ["", " "]}, path, 300)
    assert not path.exists()


def test_training_is_deterministic(texts, tmp_path):
    corpus = {lang: texts[lang] for lang in ("en", "de", "el", "ru")}
    a = train_tokenizer(corpus, tmp_path / "a.model", 500, sentences_per_language=400, seed=3)
    b = train_tokenizer(corpus, tmp_path / "b.model", 500, sentences_per_language=400, seed=3)
    assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()
    assert a.vocab_size == b.vocab_size == 500
    c = train_tokenizer(corpus, tmp_path / "c.model", 500, sentences_per_language=400, seed=4)
    assert (tmp_path / "c.model").read_bytes() != (tmp_path / "a.model").read_bytes()
    assert c.vocab_size == 500
