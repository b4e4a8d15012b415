"""XTREME's rules side by side with xtreme's own code: each test ports the function of
google-research/xtreme (or of transformers 2.x, which its `third_party` scripts import) that
holds a rule, small and faithful, names its file and function, and runs it and ours on the same
inputs.

- QA loss: transformers 2.x `RobertaForQuestionAnswering.forward` (XTREME's
  `third_party/xlm_roberta.py` subclasses it): CrossEntropyLoss over every position of the
  padded window.
- QA max context: `third_party/processors/squad.py`, `_new_check_is_max_context` (its
  `0.01 × window length` term).
- QA decoding ties: transformers 2.x `data/metrics/squad_metrics.py`,
  `compute_predictions_logits` (a stable sort by start + end logit: the first span of equal
  score wins).
- XNLI/PAWS-X files: transformers 2.x `DataProcessor._read_tsv` (`quotechar=None`) and
  `third_party/processors/xnli.py`, `XnliProcessor.get_examples` (blank sentences kept).
- PAN-X/UD-POS files: `utils_preprocess.py`'s `panx_tokenize` / `udpos_tokenize` line rule
  (`line.strip().split()`), then `third_party/utils_tag.py`, `read_examples_from_file`.
- BUCC's repeated sentences: `third_party/utils_retrieve.py`, `read_sent2id` and
  `read_candidate2score`.
- The tagging label set: `scripts/preprocess_panx.sh`'s `labels.txt`, `utils_tag.get_labels`.
- The retrieval layers: `scripts/run_bucc2018.sh`, `run_tatoeba.sh` and
  `third_party/evaluate_retrieval.py`'s `all_layer_outputs[-num_layers:][specific_layer]`.
"""

from __future__ import annotations

import collections
import csv

import numpy as np
import pytest

from tests import task_tokenizer
from xlpretrain.data.finetuning.qa_windows import (
    best_indexes,
    decode_answers,
    encode_questions,
    max_context,
    window_spans,
)
from xlpretrain.data.finetuning.task_examples import Answer, PairLayout, QAExample
from xlpretrain.data.xtreme import read_pair_file, read_tagged_file
from xlpretrain.objectives import task_losses

XLMR = PairLayout(separators=2, token_types=False)
EN = "Paris is the capital of France, said Mr. Smith."


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return task_tokenizer.train(tmp_path_factory.mktemp("task_tokenizer"))


# --- QA loss --------------------------------------------------------------------------------


def hf_v2_qa_loss(start_logits, end_logits, start_positions, end_positions):
    """transformers 2.x `BertForQuestionAnswering` / `RobertaForQuestionAnswering.forward`'s
    loss (`modeling_roberta.py`), in torch as there."""
    torch = pytest.importorskip("torch")
    from torch.nn import CrossEntropyLoss

    start_logits, end_logits = torch.tensor(start_logits), torch.tensor(end_logits)
    start_positions = torch.tensor(start_positions, dtype=torch.long)
    end_positions = torch.tensor(end_positions, dtype=torch.long)
    # sometimes the start/end positions are outside our model inputs, we ignore these terms
    ignored_index = start_logits.size(1)
    start_positions.clamp_(0, ignored_index)
    end_positions.clamp_(0, ignored_index)
    loss_fct = CrossEntropyLoss(ignore_index=ignored_index)
    start_loss = loss_fct(start_logits, start_positions)
    end_loss = loss_fct(end_logits, end_positions)
    return float((start_loss + end_loss) / 2)


def test_qa_loss_runs_over_the_whole_window_as_xtreme(tokenizer):
    """Training windows of 48 positions, most of them padding: our loss over the batch
    (`QAWindows.batch`, the default `loss_over="window"`) is transformers 2.x's over the same
    logits; `loss_over="tokens"` (padding masked out) is not."""
    examples = [
        QAExample("a", "Capital?", EN, (Answer("France", EN.index("France")),)),
        QAExample("b", "Who?", EN, (Answer("Mr. Smith", EN.index("Mr. Smith")),)),
    ]
    windows = encode_questions(examples, tokenizer, layout=XLMR, training=True, max_length=48)
    batch = windows.batch(np.arange(len(windows)))
    assert (batch["segment_ids"] == 0).sum() > 20  # padding inside the rows
    rng = np.random.default_rng(0)
    start, end = rng.normal(size=(2, *batch["input_ids"].shape)).astype(np.float32)
    ours, _, count = task_losses.span_cross_entropy(start, end, batch)
    reference = hf_v2_qa_loss(start, end, batch["start_positions"], batch["end_positions"])
    assert float(count) == 2 * len(windows)
    np.testing.assert_allclose(float(ours), reference, rtol=1e-6)
    masked = encode_questions(
        examples, tokenizer, layout=XLMR, training=True, max_length=48, loss_over="tokens"
    ).batch(np.arange(len(windows)))
    tokens_loss, _, _ = task_losses.span_cross_entropy(start, end, masked)
    assert abs(float(tokens_loss) - reference) > 1e-3


# --- QA max context -------------------------------------------------------------------------


def xtreme_new_check_is_max_context(doc_spans, cur_span_index, position):
    """third_party/processors/squad.py, `_new_check_is_max_context`, as there."""
    best_score = None
    best_span_index = None
    for span_index, doc_span in enumerate(doc_spans):
        end = doc_span["start"] + doc_span["length"] - 1
        if position < doc_span["start"]:
            continue
        if position > end:
            continue
        num_left_context = position - doc_span["start"]
        num_right_context = end - position
        score = min(num_left_context, num_right_context) + 0.01 * doc_span["length"]
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return cur_span_index == best_span_index


def xtreme_max_context(spans, window):
    doc_spans = [{"start": s, "length": n} for s, n in spans]
    start, length = spans[window]
    return [
        xtreme_new_check_is_max_context(doc_spans, window, p) for p in range(start, start + length)
    ]


def test_max_context_is_xtremes_with_its_window_length_term():
    """On spans where a later window is longer (only the `0.01 × length` term tells the tied
    windows apart: the longer wins) and on random spans, as `window_spans` lays them out and
    arbitrary: ours equals `_new_check_is_max_context`."""
    spans = [(0, 3), (0, 5)]  # token 1: min(1, 1) in both, + 0.03 against + 0.05: the second
    assert max_context(spans, 0).tolist() == xtreme_max_context(spans, 0) == [False] * 3
    assert max_context(spans, 1).tolist() == xtreme_max_context(spans, 1)
    rng = np.random.default_rng(0)
    for _ in range(300):
        if rng.random() < 0.5:
            capacity = int(rng.integers(1, 12))
            spans = window_spans(int(rng.integers(1, 40)), capacity, int(rng.integers(1, 12)))
        else:
            starts = np.sort(rng.integers(0, 20, int(rng.integers(1, 5))))
            spans = [(int(s), int(rng.integers(1, 10))) for s in starts]
        for w in range(len(spans)):
            assert max_context(spans, w).tolist() == xtreme_max_context(spans, w), spans


# --- QA decoding ties -----------------------------------------------------------------------


def hf_v2_best_span(start_logits, end_logits, windows, n_best_size=20, max_answer_length=30):
    """The top prediction of transformers 2.x `compute_predictions_logits`
    (data/metrics/squad_metrics.py), for one question: every feature's candidates in feature
    order, `_get_best_indexes` order of starts then ends, then `sorted(..., reverse=True)` by
    start + end logit, which is stable: of equal scores the first appended wins. As (window,
    start, end)."""
    _PrelimPrediction = collections.namedtuple(  # noqa: N806
        "PrelimPrediction",
        ["feature_index", "start_index", "end_index", "start_logit", "end_logit"],
    )
    prelim_predictions = []
    for feature_index in range(len(windows)):
        length = len(windows.rows[feature_index])
        token_is_max_context = windows.max_context[feature_index]
        token_to_orig_map = windows.token_words[feature_index]
        start_indexes = best_indexes(start_logits[feature_index], n_best_size)
        end_indexes = best_indexes(end_logits[feature_index], n_best_size)
        for start_index in start_indexes:
            for end_index in end_indexes:
                if start_index >= length or end_index >= length:
                    continue
                if token_to_orig_map[start_index] < 0 or token_to_orig_map[end_index] < 0:
                    continue
                if not token_is_max_context[start_index]:
                    continue
                if end_index < start_index:
                    continue
                if end_index - start_index + 1 > max_answer_length:
                    continue
                prelim_predictions.append(
                    _PrelimPrediction(
                        feature_index=feature_index,
                        start_index=start_index,
                        end_index=end_index,
                        start_logit=start_logits[feature_index][start_index],
                        end_logit=end_logits[feature_index][end_index],
                    )
                )
    prelim_predictions = sorted(
        prelim_predictions, key=lambda x: x.start_logit + x.end_logit, reverse=True
    )
    best = prelim_predictions[0]
    return best.feature_index, best.start_index, best.end_index


def test_of_two_spans_with_equal_scores_the_first_wins(tokenizer):
    """Two windows (one token a word, 6 tokens 2 apart) each with a span of the same score
    (Berlin in the first, Paris in the second; then Paris and Berlin, words 4 and 5, in one
    window: the earlier start): the first, as `compute_predictions_logits`' stable sort keeps it."""
    context = "Paris Berlin Smith capital Paris Berlin Smith capital"
    example = QAExample("q", "Paris?", context)
    windows = encode_questions(
        [example], tokenizer, layout=XLMR, training=False, max_length=12, doc_stride=2
    )
    start_logits = np.zeros((len(windows), 12))
    end_logits = np.zeros((len(windows), 12))

    def token(w, word):
        t = int(np.flatnonzero(windows.token_words[w] == word)[0])
        assert windows.max_context[w][t]
        return t

    berlin, paris = token(0, 1), token(1, 4)
    start_logits[0, berlin] = end_logits[0, berlin] = 5.0
    start_logits[1, paris] = end_logits[1, paris] = 5.0
    w, s, t = hf_v2_best_span(start_logits, end_logits, windows)
    assert (w, s, t) == (0, berlin, berlin)
    assert decode_answers(start_logits, end_logits, windows, [example]) == {"q": "Berlin"}
    # In one window: Paris (word 4) and Berlin (word 5) at the same score.
    start_logits[:], end_logits[:] = 0.0, 0.0
    later = token(1, 5)
    start_logits[1, [paris, later]] = end_logits[1, [paris, later]] = 5.0
    w, s, t = hf_v2_best_span(start_logits, end_logits, windows)
    assert (w, s, t) == (1, paris, paris)
    assert decode_answers(start_logits, end_logits, windows, [example]) == {"q": "Paris"}


# --- sentence pairs (XNLI, PAWS-X) ----------------------------------------------------------


def hf_v2_read_tsv(input_file, quotechar=None):
    """transformers 2.x `DataProcessor._read_tsv` (data/processors/utils.py)."""
    with open(input_file, encoding="utf-8-sig") as f:
        return list(csv.reader(f, delimiter="\t", quotechar=quotechar))


def xtreme_pair_examples(path, split, test_label):
    """third_party/processors/xnli.py (pawsx.py alike), `XnliProcessor.get_examples`, for one
    file: (text_a, text_b, label)."""
    examples = []
    for line in hf_v2_read_tsv(path):
        text_a = line[0]
        text_b = line[1]
        if split == "test" and len(line) != 3:
            label = test_label
        else:
            label = str(line[2].strip())
        examples.append((text_a, text_b, label))
    return examples


PAIR_ROWS = [
    ('He said "no" twice .', "He agreed .", "contradiction"),
    ("", "A blank first sentence .", "neutral"),  # blank: trained on there
    ('"Quoted"', 'and "quotes" ""', "entailment"),
    ("A blank second sentence .", "", "entailment"),
]


@pytest.mark.parametrize("split", ["train", "test"])
def test_pair_files_read_as_xtreme_reads_them(tmp_path, split):
    """A file as utils_preprocess.py writes one (`csv.writer(delimiter="\\t")`: CRLF, quoted
    fields) with quotes, blank sentences and, in test, a row of two blank sentences: our
    reader gives XTREME's texts (the quotes as written) and keeps every row."""
    rows = PAIR_ROWS if split == "train" else [(a, b) for a, b, _ in PAIR_ROWS] + [("", "")]
    path = tmp_path / f"{split}-en.tsv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f, delimiter="\t").writerows(rows)
    theirs = xtreme_pair_examples(path, split, test_label="neutral")
    ours, stats = read_pair_file(path, training=split == "train")
    assert stats.used == len(rows) == len(theirs)
    expected = [(a, b, c if split == "train" else None) for a, b, c in theirs]
    assert [(e.text_a, e.text_b, e.label) for e in ours] == expected
    assert ours[0].text_a == '"He said ""no"" twice ."'


# --- the classifier's initialisation --------------------------------------------------------


def hf_v2_classification_head(hidden_size, num_labels, initializer_range):
    """transformers 2.x `RobertaClassificationHead` (modeling_roberta.py; XLM-R's
    `XLMRobertaForSequenceClassification`) as `BertPreTrainedModel._init_weights` leaves it:
    (dense weight, dense bias, out_proj weight, out_proj bias), weights `[in, out]`."""
    torch = pytest.importorskip("torch")
    from torch import nn

    dense, out_proj = nn.Linear(hidden_size, hidden_size), nn.Linear(hidden_size, num_labels)
    for module in (dense, out_proj):  # _init_weights
        module.weight.data.normal_(mean=0.0, std=initializer_range)
        if module.bias is not None:
            module.bias.data.zero_()
    with torch.no_grad():
        return tuple(
            np.asarray(x.T if x.ndim == 2 else x)
            for x in (dense.weight, dense.bias, out_proj.weight, out_proj.bias)
        )


@pytest.mark.parametrize("kind", ["sequence_classification", "token_classification"])
def test_the_classifier_starts_as_xtremes(kind):
    """XLM-R's pair classifier (`head_dense`, `head_out`) and token classifier (`classifier`)
    start as transformers 2.x's: kernels N(0, 0.02), biases 0 (Flax's default, lecun normal,
    has std 1/√H = 0.0625 here)."""
    import flax.linen as nn
    import jax

    from xlpretrain import backbones, tasks
    from xlpretrain.tasks.declaration import Head

    hidden, labels = 256, 7
    config = backbones.get("xlmr").config(
        vocab_size=64, hidden_size=hidden, num_heads=4, mlp_dim=64, num_layers=1,
        max_positions=16,
    )  # fmt: skip
    module = tasks.get(kind).module(Head(config, "linear", labels))
    batch = {
        "input_ids": np.zeros((1, 8), np.int32),
        "segment_ids": np.ones((1, 8), np.int32),
        "positions": np.arange(2, 10, dtype=np.int32)[None],
    }
    params = nn.unbox(module.init(jax.random.key(0), batch)["params"])
    theirs = hf_v2_classification_head(hidden, labels, config.initializer_range)
    if kind == "sequence_classification":
        ours = (params["head_dense"], params["head_out"])
        pairs = [(ours[0]["kernel"], theirs[0]), (ours[1]["kernel"], theirs[2])]
        biases = [(ours[0]["bias"], theirs[1]), (ours[1]["bias"], theirs[3])]
    else:
        head = params["head"]["classifier"]
        pairs, biases = [(head["kernel"], theirs[2])], [(head["bias"], theirs[3])]
    for ours_kernel, their_kernel in pairs:
        assert np.shape(ours_kernel) == their_kernel.shape
        for kernel in (np.asarray(ours_kernel), their_kernel):
            assert abs(kernel.std() - 0.02) < 0.002 and abs(kernel.mean()) < 0.003
    for ours_bias, their_bias in biases:
        assert not np.asarray(ours_bias).any() and not their_bias.any()


# --- tagged files (PAN-X, UD-POS) -----------------------------------------------------------


def xtreme_tokenize_preprocess(infile, outfile, default_label):
    """utils_preprocess.py, `panx_tokenize_preprocess._preprocess_one_file` (`udpos_…` alike,
    label "X"), with a tokenizer that makes one piece of every word and a `max_len` no
    sentence reaches (the pieces' count decides only the `<unk>`s and the cuts, left out)."""
    with open(infile, encoding="utf-8") as fin, open(outfile, "w", encoding="utf-8") as fout:
        for line in fin:
            line = line.strip()
            if not line:
                fout.write("\n")
                continue
            items = line.split()
            token = items[0].strip()
            if len(items) == 2:
                label = items[1].strip()
            else:
                label = default_label
            fout.write(f"{token}\t{label}\n")


def xtreme_read_examples_from_file(file_path):
    """third_party/utils_tag.py, `read_examples_from_file`: (words, labels) per sentence."""
    examples = []
    with open(file_path, encoding="utf-8") as f:
        words, labels = [], []
        for line in f:
            if line.startswith("-DOCSTART-") or line == "" or line == "\n":
                if words:
                    examples.append((words, labels))
                    words, labels = [], []
            else:
                splits = line.split("\t")
                words.append(splits[0])
                if len(splits) > 1:
                    labels.append(splits[-1].replace("\n", ""))
                else:
                    labels.append("O")
        if words:
            examples.append((words, labels))
    return examples


TAGGED = (
    "Anna\tB-PER\nlives\nin\t \nNew\u00a0York\tB-LOC\n\n"  # no label, blank label, U+00A0
    "-DOCSTART-\tO\n\n"
    "10\u2009000\tO\nyen\u3000円\tB-CUR\nRome\tB-LOC\tX\n"  # U+2009, U+3000, three fields
)


@pytest.mark.parametrize("task, default", [("panx", "O"), ("udpos", "X")])
def test_tagged_training_file_read_as_xtreme_reads_it(tmp_path, task, default):
    """XTREME's preprocessing then its reader, and ours, on a training file with words holding
    non-tab whitespace and lines without (or with a blank, or a third) label: the same words
    and labels (`New`, `10`, `yen`, each with the default label), every line trained on."""
    path, preprocessed = tmp_path / "train-en.tsv", tmp_path / "train.xlmr"
    path.write_text(TAGGED, encoding="utf-8")
    xtreme_tokenize_preprocess(path, preprocessed, default)
    theirs = xtreme_read_examples_from_file(preprocessed)
    ours, stats = read_tagged_file(path, training=True, default_label=default)
    assert [(list(s.words), list(s.labels)) for s in ours] == theirs
    assert theirs[0][0] == ["Anna", "lives", "in", "New"] and theirs[1][0][:2] == ["10", "yen"]
    assert stats.used == 7


def test_tagged_test_file_words_as_xtreme_reads_them(tmp_path):
    """A test file (words alone): each line is one word, its first whitespace piece."""
    path, preprocessed = tmp_path / "test-de.tsv", tmp_path / "test.xlmr"
    path.write_text("New\u00a0York\nist\n\ngroß\u3000und\n", encoding="utf-8")
    xtreme_tokenize_preprocess(path, preprocessed, "O")
    theirs = [words for words, _ in xtreme_read_examples_from_file(preprocessed)]
    ours, _ = read_tagged_file(path, training=False)
    assert [list(s.words) for s in ours] == theirs == [["New", "ist"], ["groß"]]
    assert all(s.labels is None for s in ours)


# --- BUCC's duplicate sentences -------------------------------------------------------------


def xtreme_read_sent2id(text_file, id_file, encoding="utf-8"):
    """third_party/utils_retrieve.py, `read_sent2id`."""
    repeated = set()
    sent2id = {}
    with open(id_file, encoding=encoding, errors="surrogateescape") as f:
        ids = [line.strip() for line in f]
    with open(text_file, encoding=encoding, errors="surrogateescape") as f:
        sentences = [line.strip() for line in f]
    for id, sent in zip(ids, sentences):  # noqa: A001, B905
        if sent in sent2id:
            repeated.add(sent)
        else:
            sent2id[sent] = id
    for sent in repeated:
        del sent2id[sent]
    return sent2id


def xtreme_read_candidate2score(candidates_file, src_text, trg_text, src_id, trg_id):
    """third_party/utils_retrieve.py, `read_candidate2score`."""
    src_sent2id = xtreme_read_sent2id(src_text, src_id)
    trg_sent2id = xtreme_read_sent2id(trg_text, trg_id)
    candidate2score = {}
    with open(candidates_file, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            score, src, trg = line.split("\t")
            score = float(score)
            src = src.strip()
            trg = trg.strip()
            if src in src_sent2id and trg in trg_sent2id:
                src_id = src_sent2id[src]
                trg_id = trg_sent2id[trg]
                score = max(score, candidate2score.get((src_id, trg_id), score))
                candidate2score[(src_id, trg_id)] = score
    return candidate2score


def test_bucc_drops_every_candidate_of_a_repeated_sentence(tmp_path):
    """Two sides with repeated sentences (one repeated twice on the source side, one on the
    English side), mined over their unique texts as `mine_bitext` (and `text_candidates`) mine
    them, the candidates written as `mine_bitext` writes them (`score<TAB>source<TAB>target`):
    the pairs and scores XTREME reads back are ours; a pair holding a repeated sentence is in
    neither, not even under the sentence's first id."""
    from xlpretrain.eval.mining import Candidates, first_rows
    from xlpretrain.eval.xtreme.retrieval import unique_candidates

    source = ["Ein Hund .", "Guten Tag .", "Ein Hund .", "Die Katze .", "Ja .", "Ja ."]
    english = ["Hello .", "A dog .", "Hello .", "The cat .", "Yes ."]
    ids = (
        [f"de-{i:09d}" for i in range(len(source))],
        [f"en-{i:09d}" for i in range(len(english))],
    )
    rng = np.random.default_rng(0)
    unique = (first_rows(source), first_rows(english))
    # Every pair of unique rows a candidate, as many one-to-one minings would give over runs.
    rows = [(a, b) for a in unique[0] for b in unique[1]]
    candidates = Candidates(
        np.array([a for a, _ in rows]),
        np.array([b for _, b in rows]),
        rng.uniform(0.9, 1.3, len(rows)),
    )
    files = {}
    for name, side, side_ids in (("de", source, ids[0]), ("en", english, ids[1])):
        files[name] = tmp_path / f"de-en.test.{name}.txt", tmp_path / f"de-en.test.{name}.id"
        files[name][0].write_text("".join(f"{text}\n" for text in side), encoding="utf-8")
        files[name][1].write_text("".join(f"{i}\n" for i in side_ids), encoding="utf-8")
    mined = tmp_path / "candidates_7.tsv"
    rows_and_scores = (candidates.l1_rows, candidates.l2_rows, candidates.scores)
    mined.write_text(
        "".join(
            f"{score}\t{source[a]}\t{english[b]}\n"
            for a, b, score in zip(*rows_and_scores, strict=True)
        ),
        encoding="utf-8",
    )
    (de_text, de_id), (en_text, en_id) = files["de"], files["en"]
    theirs = xtreme_read_candidate2score(mined, de_text, en_text, de_id, en_id)
    pairs, scores = unique_candidates(ids, (source, english), candidates)
    assert dict(zip(pairs, scores.tolist(), strict=True)) == pytest.approx(theirs)
    assert len(pairs) == 2 * 3  # Guten Tag, Die Katze × A dog, The cat, Yes
    assert ("de-000000000", "en-000000001") not in theirs  # Ein Hund: repeated


# --- the tagging label set ------------------------------------------------------------------


def xtreme_labels_txt(folder, default_label, tmp_path):
    """scripts/preprocess_panx.sh (preprocess_udpos.sh alike): every file through
    `panx_tokenize` (above), then `cat $SAVE_DIR/*/*.${MODEL} | cut -f 2 | grep -v "^$" | sort |
    uniq > labels.txt`; then third_party/utils_tag.py, `get_labels` ("O" first where missing)."""
    found = set()
    for path in sorted(folder.glob("*.tsv")):
        out = tmp_path / f"{path.stem}.xlmr"
        xtreme_tokenize_preprocess(path, out, default_label)
        for line in out.read_text(encoding="utf-8").splitlines():
            field = line.split("\t")[1] if "\t" in line else line
            if field:
                found.add(field)
    labels = sorted(found)
    if "O" not in labels:
        labels = ["O"] + labels
    return labels


@pytest.mark.parametrize("protocol", ["zero_shot", "in_language"])
def test_tagging_labels_come_from_every_languages_files(tmp_path, protocol):
    """Every run's label set is XTREME's `labels.txt` of all the task's files: a German dev
    tag that no training file has (B-MISC, written here) is a label of every run, the German
    one included, which before stopped at it (`label(s) ['B-MISC'] not among ...`)."""
    from configs import xtreme as xtreme_config
    from tests import xtreme_fixtures as fx
    from xlpretrain.finetune import registry
    from xlpretrain.finetune.plan import resolve
    from xlpretrain.finetune.schema import check as check_run_config

    root = fx.write_xtreme_dir(tmp_path / "x", ("panx",))
    with open(root / "panx" / "dev-de.tsv", "a", encoding="utf-8") as f:
        f.write("\nMünchen\tB-MISC\n")
    cfg = xtreme_config.get_config("base")
    cfg.init.path, cfg.data.dir, cfg.tasks, cfg.protocol = "model", str(root), "panx", protocol
    check_run_config(cfg)
    runs = registry.get("panx").source.runs(resolve(cfg), "panx")
    theirs = xtreme_labels_txt(root / "panx", "O", tmp_path)
    assert "B-MISC" in theirs
    assert {run.labels for run in runs.values()} == {tuple(theirs)}


# --- the retrieval layers -------------------------------------------------------------------

# scripts/run_bucc2018.sh and run_tatoeba.sh, per model: the flags each passes to
# third_party/evaluate_retrieval.py (None: not passed, so its argparse default).
SCRIPTS = {
    # run_bucc2018.sh: `--specific_layer 7`, no `--num_layers` (its NLAYER=24 is never used)
    ("bucc2018", "xlm-roberta-base"): dict(num_layers=None, specific_layer=7),
    ("bucc2018", "xlm-roberta-large"): dict(num_layers=None, specific_layer=7),
    # run_tatoeba.sh: LAYER=7, NLAYER=12; for xlm-roberta-*: NLAYER=24, LAYER=13. That branch
    # cannot run on base: of its 13 states [-24:] is all 13, `extract_embeddings` saves 24
    # files of which emb_13 onwards stay zeros, so LAYER=13 reads zeros. Base takes the
    # script's 12-layer values (its mBERT branch), the state after the 8th layer.
    ("tatoeba", "xlm-roberta-base"): dict(num_layers=12, specific_layer=7),
    ("tatoeba", "xlm-roberta-large"): dict(num_layers=24, specific_layer=13),
}
HIDDEN_LAYERS = {"xlm-roberta-base": 12, "xlm-roberta-large": 24}
PRESET_OF = {"xlm-roberta-base": "base", "xlm-roberta-large": "large"}


def xtreme_state(hidden_layers, num_layers, specific_layer):
    """evaluate_retrieval.py, `extract_embeddings` then `mine_bitext`/`similarity_search` of
    `emb_{specific_layer}`: the state `all_layer_outputs[-args.num_layers:][specific_layer]`
    of the model's `hidden_states` (the embeddings' output, then each layer's), as the index
    of that state (0 the embeddings')."""
    num_layers = 12 if num_layers is None else num_layers  # --num_layers default=12
    all_layer_outputs = list(range(hidden_layers + 1))
    return all_layer_outputs[-num_layers:][specific_layer]


@pytest.mark.parametrize(("task", "model"), list(SCRIPTS))
def test_retrieval_layers_follow_the_scripts_arithmetic(task, model):
    """`configs/xtreme.py`'s `base` and `large` embed at the state XTREME's scripts take:
    after the 8th of 12 layers (base, both tasks), the 14th of 24 (large Tatoeba) and the 20th
    of 24 (large BUCC, whose script leaves `--num_layers` at 12)."""
    from configs import xtreme as xtreme_config

    expected = xtreme_state(HIDDEN_LAYERS[model], **SCRIPTS[(task, model)])
    assert xtreme_config.get_config(PRESET_OF[model])[task].layer == expected
