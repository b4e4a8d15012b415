"""XTREME's data as its users have it on disk: the layout google-research/xtreme's
`scripts/download_data.sh` (and its `utils_preprocess.py`) leaves under XTREME_DIR (its
`download/` folder), readers of each format into the task examples of
`xlpretrain.data.finetuning.task_examples`, and writers of a submission (`predictions/`, `labels/`)
in the format XTREME's evaluate.py reads.

Layout (paths under XTREME_DIR; `{lang}` a language code; "EN train / EN dev" are what XTREME's
scripts train on and select a checkpoint on; test files carry no labels, XTREME keeps them):

  xnli/      train-en.tsv (EN train: MultiNLI), dev-{lang}.tsv (dev-en.tsv: EN dev),
             test-{lang}.tsv; rows `sentence1<TAB>sentence2<TAB>label` written by csv.writer
             (CRLF, `"` quoting, which XTREME's reader keeps as text), no header, test
             rows without the label.
             Labels contradiction, entailment, neutral. 15 languages, the same in XTREME-R.
  pawsx/     train-en.tsv, dev-{lang}.tsv (dev-en.tsv: EN dev), test-{lang}.tsv; as xnli.
             Labels 0, 1. 7 languages; not in XTREME-R.
  panx/      train-{lang}.tsv (train-en.tsv: EN train), dev-{lang}.tsv (dev-en.tsv: EN dev),
             test-{lang}.tsv; one `word<TAB>tag` line per word, blank line between sentences,
             test lines the word alone; the source's `lang:` prefix is already cut. 40
             languages (XTREME-R: 48). Needs a manual step: AmazonPhotos.zip saved as
             download/AmazonPhotos.zip before the script runs.
  udpos/     as panx (train/dev only for languages whose treebank has them), from UD 2.5
             (XTREME-R's new languages from UD 2.7). 33 languages (XTREME-R: 38).
  squad/     train-v1.1.json (EN train of xquad and mlqa), dev-v1.1.json (their EN dev).
  xquad/     xquad.{lang}.json, the test (answers removed). 11 languages (XTREME-R: 12).
  mlqa/      MLQA_V1/test/test-context-{lang}-question-{lang}.json (the test, answers removed;
             also the cross-language pairs, unused), MLQA_V1/dev/dev-context-{lang}-question-
             {lang}.json (per-language dev, answers kept). 7 languages.
  tydiqa/    tydiqa-goldp-v1.1-train/tydiqa.goldp.{lang}.train.json (tydiqa.goldp.en.train.json:
             EN train; ids without the language prefix) and the whole tydiqa-goldp-v1.1-train.json;
             tydiqa-goldp-v1.1-dev/tydiqa.goldp.{lang}.dev.json, the test (answers removed). No
             EN dev: XTREME's dev set is its test. 9 languages. (XTREME's train_qa.sh names the
             train file tydiqa.en.train.json, which the preprocessing never writes.)
  bucc2018/  {lang}-en.test.{lang} and {lang}-en.test.en (`id<TAB>sentence` lines, BUCC's
             training split), {lang}-en.dev.{lang}, .en and .gold (its sample split with the
             gold `source id<TAB>English id` pairs); no training data, no test gold. de, fr, ru,
             zh; not in XTREME-R.
  tatoeba/   {lang}-en.{lang} and {lang}-en.en (one sentence per line, the English side
             sorted, hiding the alignment); no training or dev data. 36 languages (XTREME-R:
             41). (XTREME's evaluate_retrieval.py opens tatoeba.{lang}-eng.{lang} and
             tatoeba.{lang}-eng.eng instead, names the preprocessing never writes.)

Translate-train data is not made by the download script; XTREME publishes it in the
xtreme_translations bucket (XNLI/, PAWSX/, SQuAD/ translate-train). Put it at
xnli/translate-train/en-{lang}-translated.tsv, pawsx/translate-train/en-{lang}-translated.tsv
(five fields: English pair, translated pair, label) and squad/translate-train/
squad.translate.train.en-{lang}.json (SQuAD json; xquad and mlqa train on it), tydiqa's at
tydiqa/translate-train/tydiqa.translate.train.en-{lang}.json. XTREME ships none for panx,
udpos, bucc2018, tatoeba.

`read_split(find_task(XTREME_DIR, task), split, lang)` reads a pair, tagging or QA task's
split whatever its format. Training files skip and count bad lines (`FileStats`, as the
pre-training sources do); test and dev files are references, where a bad line is an error
naming file:line.
"""

from xlpretrain.data.xtreme.layout import (
    LAYOUTS,
    VERSIONS,
    TaskFiles,
    TaskLayout,
    find_task,
    task_languages,
)
from xlpretrain.data.xtreme.retrieval import BuccSplit, TatoebaSplit, read_bucc, read_tatoeba
from xlpretrain.data.xtreme.sentence_pairs import read_pair_file, read_translated_pairs
from xlpretrain.data.xtreme.splits import SPLITS, read_split
from xlpretrain.data.xtreme.squad_json import read_squad_file, write_squad_file
from xlpretrain.data.xtreme.submission import (
    submission_path,
    write_id_pairs,
    write_label_lines,
    write_labels,
    write_qa_predictions,
    write_tag_lines,
)
from xlpretrain.data.xtreme.tagging import read_tagged_file

__all__ = [
    "LAYOUTS",
    "SPLITS",
    "VERSIONS",
    "BuccSplit",
    "TaskFiles",
    "TaskLayout",
    "TatoebaSplit",
    "find_task",
    "read_bucc",
    "read_pair_file",
    "read_split",
    "read_squad_file",
    "read_tagged_file",
    "read_tatoeba",
    "read_translated_pairs",
    "submission_path",
    "task_languages",
    "write_id_pairs",
    "write_label_lines",
    "write_labels",
    "write_qa_predictions",
    "write_squad_file",
    "write_tag_lines",
]
