"""A Hugging Face `tokenizer.json` behind the tokenizer interface: special ids found by role from
the tokenizer's own files (never assumed at XLM-R's), and every program that reads a tokenizer
(`prepare`, training, `xlpretrain.load`, retrieval, the converters) working with one whose
special tokens follow its pieces, as ModernBERT's and mmBERT's do. The tokenizers are trained
offline by `tokenizers`' own trainer (`tests.tiny.train_json_tokenizer`)."""

import json
import pathlib
import pickle
import shutil
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest
import tokenizers
from tokenizers import models, pre_tokenizers, processors, trainers

import xlpretrain
from tests.tiny import model_config, prepare_store, run_config
from xlpretrain.api import hf_positions
from xlpretrain.convert import folder, modernbert, xlmr
from xlpretrain.data import demo_corpus
from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.pretraining.masking import regular_ids
from xlpretrain.data.tokenizer import HFTokenizer, SpecialIds, Tokenizer, tokenizer_file
from xlpretrain.eval.retrieval import __main__ as retrieval
from xlpretrain.model import init_params
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.plan import resolve

REPO = pathlib.Path(__file__).resolve().parents[1]
TEXTS = ["Deutschland, Frankreich und Ägypten", "Ελλάδα και Ρωσία", "日本と中国", "भारत", ""]


@pytest.fixture(scope="module")
def tok(demo_json_tokenizer_path) -> Tokenizer:
    return Tokenizer.load(demo_json_tokenizer_path)


def test_special_ids_are_the_tokenizers_own(tok):
    """Roles from the tokenizer.json alone: CLS and SEP from its post-processor, the others
    as its added special tokens spell them; all five after the 1997 pieces."""
    assert isinstance(tok, HFTokenizer) and tok.vocab_size == 2002
    assert (tok.unk_id, tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id) == tuple(range(1997, 2002))
    assert tok.special_ids().tolist() == [1998, 2000, 1999, 1997, 2001]
    assert [tok.id_to_piece(i) for i in tok.special_ids()] == [
        "[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"
    ]  # fmt: skip
    with pytest.raises(IndexError):
        tok.id_to_piece(2002)


def test_encode_decode_batch_and_pickle(tok):
    encoded = [tok.encode(text) for text in TEXTS]
    for text, ids in zip(TEXTS, encoded, strict=True):
        assert ids.dtype == np.int32 and not np.isin(ids, tok.special_ids()).any()
        assert tok.decode(ids) == text
    assert tok.decode([tok.bos_id, *encoded[0], tok.eos_id, tok.pad_id]) == TEXTS[0]
    with pytest.raises(ValueError, match="token ids"):
        tok.decode([tok.vocab_size])
    for threads in (None, 1):
        batch = tok.encode_batch(TEXTS, num_threads=threads)
        assert [b.tolist() for b in batch] == [e.tolist() for e in encoded]
    again = pickle.loads(pickle.dumps(tok))
    assert again.special == tok.special and again.encode(TEXTS[1]).tolist() == encoded[1].tolist()


def test_saving_keeps_the_file_and_names_every_role(tok, demo_json_tokenizer_path, tmp_path):
    tok.save(tmp_path / "kept" / HFTokenizer.FILE)
    kept = tmp_path / "kept" / HFTokenizer.FILE
    assert kept.read_bytes() == demo_json_tokenizer_path.read_bytes()  # the store's fingerprint
    config = json.loads((tmp_path / "kept" / HFTokenizer.CONFIG).read_text())
    assert (config["cls_token"], config["mask_token"]) == ("[CLS]", "[MASK]")
    assert Tokenizer.load(kept).special == tok.special
    assert tokenizer_file(tmp_path / "kept") == kept and tokenizer_file(tmp_path) is None
    (tmp_path / "kept" / "tokenizer.model").write_bytes(b"")
    with pytest.raises(ValueError, match="holds both tokenizer.model and tokenizer.json"):
        tokenizer_file(tmp_path / "kept")


def test_a_file_that_is_no_tokenizer_is_a_value_error_naming_it(tok, tmp_path):
    """What a command line reports in one line (tests/test_cli.py runs `train` on the commonest
    ones): not UTF-8, a side file that is no JSON, an empty or a JSON SentencePiece model."""
    (tmp_path / "tokenizer.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match=r"/tokenizer.json: not JSON \(not UTF-8 text"):
        Tokenizer.load(tmp_path / "tokenizer.json")
    tok.save(tmp_path / "tokenizer.json")
    (tmp_path / "special_tokens_map.json").write_text("{'mask_token': '[MASK]'}")
    with pytest.raises(ValueError, match=r"/special_tokens_map.json: not JSON \(Expecting"):
        Tokenizer.load(tmp_path / "tokenizer.json")
    for content, why in ((b"", "an empty file"), (b'{"pieces": []}', "INTERNAL")):
        (tmp_path / "tokenizer.model").write_bytes(content)
        with pytest.raises(ValueError, match=f"/tokenizer.model: not a SentencePiece .*{why}"):
            Tokenizer.load(tmp_path / "tokenizer.model")


def _unigram(specials: list[str]) -> tokenizers.Tokenizer:
    """A small Unigram tokenizer whose special tokens are spelled like no role."""
    tokenizer = tokenizers.Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=120, special_tokens=specials, unk_token=specials[0], show_progress=False
    )
    tokenizer.train_from_iterator(["the cat sat on the mat", "der Hund lag"] * 20, trainer)
    return tokenizer


def test_roles_from_the_files_beside_it_then_its_structure(tmp_path):
    """The side files name roles first (tokenizer_config.json before special_tokens_map.json,
    AddedToken dicts as well as strings); the tokenizer's structure gives the unknown token
    (Unigram's unk_id), the padding's token and a RobertaProcessing's cls and sep; a role
    nothing names is an error naming the file and the keys that would name it."""
    specials = ["<?>", "<go>", "<stop>", "<blank>", "<hole>", "<spare>"]
    tokenizer = _unigram(specials)
    ids = {t: tokenizer.token_to_id(t) for t in specials}
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match=r"tokenizer.json: no bos token \(cls_token or bos_token"):
        Tokenizer.load(tmp_path / "tokenizer.json")

    tokenizer.post_processor = processors.RobertaProcessing(
        ("<stop>", ids["<stop>"]),
        ("<go>", ids["<go>"]),  # sep, cls
    )
    tokenizer.enable_padding(pad_id=ids["<blank>"], pad_token="<blank>")
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match="no mask token"):
        Tokenizer.load(tmp_path / "tokenizer.json")
    hole = {"__type": "AddedToken", "content": "<hole>", "special": True}
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"mask_token": hole}))
    found = Tokenizer.load(tmp_path / "tokenizer.json")
    assert found.special.bos == ids["<go>"] and found.special.eos == ids["<stop>"]
    assert (found.unk_id, found.pad_id, found.mask_id) == (
        ids["<?>"],
        ids["<blank>"],
        ids["<hole>"],
    )
    assert found.special.others == (ids["<spare>"],)  # never masked, never drawn

    config = {"mask_token": "<spare>", "cls_token": None, "bos_token": "<stop>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    found = Tokenizer.load(tmp_path / "tokenizer.json")
    assert (found.mask_id, found.bos_id) == (ids["<spare>"], ids["<stop>"])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<nowhere>"}))
    with pytest.raises(ValueError, match="its mask token '<nowhere>' is not in its vocabulary"):
        Tokenizer.load(tmp_path / "tokenizer.json")


@pytest.mark.parametrize("processor", ["template", "roberta"])
def test_roles_follow_the_files_structure_not_the_usual_spellings(processor, tmp_path):
    """A tokenizer.json whose post-processor starts units with `<go>` and ends them with `<stop>`,
    pads with `<blank>` and whose model's unknown token is `<?>`, while `<s>`, `</s>`, `<pad>`
    and `<unk>` are added special tokens too: each role is the token its structure gives it,
    the usual spellings are other special tokens, and a saved copy keeps those roles."""
    spelled = ["<s>", "</s>", "<pad>", "<unk>"]
    tokenizer = _unigram(["<?>", "<go>", "<stop>", "<blank>", "<mask>", *spelled])
    ids = {t: tokenizer.token_to_id(t) for t in ["<?>", "<go>", "<stop>", "<blank>", "<mask>"]}
    if processor == "template":
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<go> $A <stop>",
            pair="<go> $A <stop> $B <stop>",
            special_tokens=[("<go>", ids["<go>"]), ("<stop>", ids["<stop>"])],
        )
    else:
        tokenizer.post_processor = processors.RobertaProcessing(
            ("<stop>", ids["<stop>"]), ("<go>", ids["<go>"])
        )
    tokenizer.enable_padding(pad_id=ids["<blank>"], pad_token="<blank>")
    tokenizer.save(str(tmp_path / "tokenizer.json"))

    found = Tokenizer.load(tmp_path / "tokenizer.json")
    want = SpecialIds(
        bos=ids["<go>"],
        pad=ids["<blank>"],
        eos=ids["<stop>"],
        unk=ids["<?>"],
        mask=ids["<mask>"],  # no structure names a mask: its spelling does
        others=tuple(sorted(tokenizer.token_to_id(t) for t in spelled)),
    )
    assert found.special == want
    found.save(tmp_path / "copy" / "tokenizer.json")
    assert Tokenizer.load(tmp_path / "copy" / "tokenizer.json").special == want


def test_random_replacements_are_every_regular_id_and_only_those():
    specials = np.array([0, 5, 6, 19])
    draws = np.arange(20 - len(specials))
    np.testing.assert_array_equal(
        regular_ids(draws, specials), np.setdiff1d(np.arange(20), specials)
    )


def test_api_positions_count_real_tokens_whatever_the_pad_id():
    ids = np.array([[7, 1, 8, 2000, 2000], [1, 2000, 2000, 2000, 2000]])
    np.testing.assert_array_equal(
        hf_positions(ids, 1, pad_id=2000), [[2, 3, 4, 1, 1], [2, 1, 1, 1, 1]]
    )


def test_an_xlmr_export_refuses_a_tokenizer_that_pads_elsewhere(tok, tmp_path):
    """HF XLM-R finds padding by its position index, so only a ModernBERT export can carry a
    tokenizer whose pad id is another."""
    config = model_config(vocab_size=2002)
    params = jax.tree.map(np.asarray, nn.unbox(init_params(config, jax.random.key(0))))
    with pytest.raises(ValueError, match="tokenizer pads with id 2000"):
        xlmr.CONVERTER.write_hf(folder.Pretrained(config, params, tok), tmp_path / "hf")


@pytest.fixture(scope="module")
def workdir(demo_json_tokenizer_path, tmp_path_factory) -> pathlib.Path:
    """`configs/demo.py` as the README runs it, on ModernBERT layers with the tokenizer.json,
    for 6 steps (evaluation, retrieval included, at the last)."""
    path = tmp_path_factory.mktemp("json_run")
    overrides = [
        f"--config.tokenizer.path={demo_json_tokenizer_path}",
        "--config.model.architecture=modernbert",
        "--config.model.absolute_positions=False",
        "--config.train.steps=6",
        "--config.train.log_every=3",
        "--config.train.checkpoint_every=6",
        "--config.eval.every_steps=6",
        "--config.eval.batches=1",
        "--config.eval.retrieval_lines=20",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.train", "--config", "configs/demo.py",
         "--workdir", str(path), *overrides],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "step 6/6 | loss " in result.stdout
    return path


def test_training_keeps_the_tokenizer_and_load_encodes_with_it(workdir, tok):
    assert tokenizer_file(workdir) == workdir / "tokenizer.json"
    assert (workdir / "tokenizer_config.json").is_file()
    model = xlpretrain.load(workdir)
    assert model.tokenizer.special == tok.special and model.pad_id == tok.pad_id
    texts = ["Frankreich", "Deutschland, Frankreich und Ägypten"]
    together, alone = model.encode(texts), model.encode(texts[:1])
    assert together.shape == (2, model.config.hidden_size)
    np.testing.assert_allclose(together[0], alone[0], atol=1e-5)  # padding is not read


def test_retrieval_reads_the_workdirs_tokenizer(workdir, capsys):
    folders = demo_corpus.build_demo_corpus(demo_corpus.default_demo_cache_dir())
    retrieval.main(
        ["--workdir", str(workdir), "--data", str(folders.held_out_parallel),
         "--pairs", "en-de,en-fr", "--max-lines", "20", "--json"]
    )  # fmt: skip
    output = json.loads(capsys.readouterr().out)
    assert set(output["pairs"]) == {"en-de", "en-fr"}


def test_a_modernbert_export_carries_the_tokenizer_and_its_ids(workdir, tok, tmp_path):
    """The HF folder has the tokenizer.json and a config with its ids, which transformers reads
    back: its tokenizer gives our rows, its model our logits."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    modernbert.CONVERTER.write_hf(folder.read(workdir), tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert [config[f"{k}_token_id"] for k in ("cls", "sep", "pad")] == [1998, 1999, 2000]
    text = "Deutschland, Frankreich und Ägypten"
    ids = [tok.bos_id, *tok.encode(text).tolist(), tok.eos_id]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert hf_tokenizer(text)["input_ids"] == ids
    exported = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        theirs = exported(torch.tensor([ids])).logits.numpy()
    ours = xlpretrain.load(workdir).mlm_logits(np.array([ids]))
    np.testing.assert_allclose(ours, theirs, atol=2e-4)
    again = modernbert.CONVERTER.read_hf(tmp_path / "hf")
    assert again.tokenizer.special == tok.special


def test_a_store_prepared_with_it_trains_a_run(demo_json_tokenizer_path, tmp_path):
    """`prepare` keeps the tokenizer.json (and its roles) in the store; a run on the store with
    no tokenizer of its own takes the store's, size and all, into its workdir."""
    folders = demo_corpus.build_demo_corpus(demo_corpus.default_demo_cache_dir())
    corpus = tmp_path / "corpus"
    for kind, source in (("mono", folders.mono), ("parallel", folders.parallel)):
        (corpus / kind).mkdir(parents=True)
        for path in sorted(source.iterdir())[:3]:
            shutil.copy(path, corpus / kind)
    manifest = prepare_store(corpus, tmp_path / "store", demo_json_tokenizer_path)
    assert store_lib.tokenizer_path(tmp_path / "store") == str(
        tmp_path / "store" / "tokenizer.json"
    )
    assert manifest["tokenizer"]["vocab_size"] == 2002
    mono, _ = store_lib.open_store(tmp_path / "store", ["mono"])
    language = mono.languages[0]
    original = (corpus / "mono" / f"{language}.txt").read_text().splitlines()[0]
    assert mono.line(language, 0) == original
    with pytest.raises(DataError, match="differs from --tokenizer"):
        prepare_store(corpus, tmp_path / "store", folders.mono.parent / "DONE")

    cfg = run_config(model__vocab_size=0, train__steps=2, data__store=str(tmp_path / "store"))
    trainer = trainer_lib.build(resolve(cfg), str(tmp_path / "run"), jax.devices()[:1])
    try:
        trainer_lib.run(trainer)
    finally:
        trainer.checkpointer.close()
    kept = tmp_path / "run" / "tokenizer.json"
    assert kept.read_bytes() == demo_json_tokenizer_path.read_bytes()
    assert Tokenizer.load(kept).special == Tokenizer.load(demo_json_tokenizer_path).special
