"""What each model family (XLM-R, ModernBERT, BERT) is called and how its layers are built:
the facts its backbone declaration (`xlpretrain.backbones`) and its Hugging Face converter
(`xlpretrain.convert`) both need, stated once in a layer below both.

The converter cannot read them from the declaration: a declaration names its converter, which
imports Flax, while checking a config must not. (Not `model.config.ModelFamily`, which says
whether a run trains a masked LM or an ELECTRA pair.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xlpretrain.data.finetuning.task_examples import PairLayout
from xlpretrain.model.config import LAYER_FEATURES, TASK_HEADS, ModelConfig


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family.

    - ``name``: its `model.architecture` value; ``title``: how messages name it.
    - ``features``: its `LAYER_FEATURES` (layer type, token-type rows, first position row).
    - ``hf_model_types``: the `config.json` `model_type` values its converter reads; exports
      write the first.
    - ``task_head``: how its fine-tuning heads read the hidden states (`TASK_HEADS`), as its
      HF task classes do.
    - ``pair_layout``: how it lays two segments into one row, as its HF tokenizer does.
    """

    name: str
    title: str
    features: Mapping[str, Any]
    hf_model_types: tuple[str, ...]
    task_head: str
    pair_layout: PairLayout

    def __post_init__(self) -> None:
        if set(self.features) != set(LAYER_FEATURES):
            raise ValueError(f"backbone {self.name}: features must be {LAYER_FEATURES}")
        if self.task_head not in TASK_HEADS:
            raise ValueError(f"backbone {self.name}: task_head must be one of {TASK_HEADS}")

    @property
    def hf_model_type(self) -> str:
        """The `model_type` an export's `config.json` states."""
        return self.hf_model_types[0]

    def config(self, **fields: Any) -> ModelConfig:
        """A `ModelConfig` of this family with `fields` (the others at their defaults)."""
        return ModelConfig(architecture=self.name, **self.features, **fields)


XLMR = Family(
    name="xlmr",
    title="XLM-R / RoBERTa",
    # Post-LN layers, one token type, positions after the padding row: `ModelConfig`'s defaults.
    features={"layer_type": "post_ln", "token_type_rows": 1, "positions_from": 2},
    hf_model_types=("xlm-roberta", "roberta"),
    task_head="linear",
    pair_layout=PairLayout(separators=2, token_types=False),  # <s> A </s></s> B </s>
)
MODERNBERT = Family(
    name="modernbert",
    title="ModernBERT / mmBERT",
    # Pre-norm layers, no token types, rotary positions from 0.
    features={"layer_type": "pre_ln", "token_type_rows": 0, "positions_from": 0},
    hf_model_types=("modernbert",),
    # ModernBertForTokenClassification / …ForQuestionAnswering: its prediction head first.
    task_head="transformed",
    pair_layout=PairLayout(separators=1, token_types=False),  # [CLS] A [SEP] B [SEP]
)
BERT = Family(
    name="bert",
    title="BERT / mBERT",
    # Post-LN layers, two token types, positions from the table's first row.
    features={"layer_type": "post_ln", "token_type_rows": 2, "positions_from": 0},
    hf_model_types=("bert",),
    task_head="linear",
    # [CLS] A [SEP] B [SEP], token type 1 on B [SEP]
    pair_layout=PairLayout(separators=1, token_types=True),
)
