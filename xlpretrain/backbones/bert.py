"""BERT / mBERT: XLM-R's post-LN layers with biases, but two token-type rows (type 0 added to
every token, as HF does without `token_type_ids`) and learned positions from row 0; optionally
the same XLM, VECO and XLM-E additions as XLM-R. Converted by `convert.bert`."""

from __future__ import annotations

import dataclasses

from xlpretrain.backbones import xlmr
from xlpretrain.families import BERT

# Learned positions, or XLM-R's relative ones: XLM-R's layers, so its settings, check and
# function settings; its own family, converter and peer.
BACKBONE = dataclasses.replace(
    xlmr.BACKBONE,
    family=BERT,
    converter="xlpretrain.convert.bert",
    peer_name="transformers BertForMaskedLM (sdpa attention)",
)
