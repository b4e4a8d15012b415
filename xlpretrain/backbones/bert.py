"""BERT / mBERT: XLM-R's post-LN layers with biases, but two token-type rows (type 0 added to
every token, as HF does without `token_type_ids`) and learned positions from row 0; optionally
the same XLM, VECO and XLM-E additions as XLM-R. Converted by `convert.bert`."""

from __future__ import annotations

from xlpretrain.backbones.declaration import Backbone
from xlpretrain.backbones.xlmr import SECTION, check_settings
from xlpretrain.families import BERT

BACKBONE = Backbone(
    family=BERT,
    # Learned positions, or XLM-R's relative ones: the same layers, settings and check.
    section=SECTION,
    check=check_settings,
    function_settings=("layer_norm_eps", "max_distance"),
    converter="xlpretrain.convert.bert",
    peer_name="transformers BertForMaskedLM (sdpa attention)",
)
