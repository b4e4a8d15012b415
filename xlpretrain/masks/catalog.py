"""Which attention masks each objective runs, under the names `python -m xlpretrain.masks`
shows them by. One table, read by the objectives' declarations and by the masks CLI, so that
the CLI shows any objective's masks without importing the objectives (their losses, the
model)."""

from xlpretrain import masks
from xlpretrain.masks import AttentionMask, ExampleLayout

MMLM = AttentionMask("mmlm", masks.mmlm, ExampleLayout.SEGMENTS)
TLM = AttentionMask("tlm", masks.tlm, ExampleLayout.PAIR)
CAMLM = AttentionMask("camlm", masks.camlm, ExampleLayout.PAIR)
BTMLM_GENERATE = AttentionMask("btmlm_generate", masks.btmlm_generate, ExampleLayout.PLACEHOLDERS)
BTMLM = AttentionMask("btmlm", masks.btmlm, ExampleLayout.PSEUDO_TOKENS)
# In the layout of a pair (x, y): the s stream reads the other sequence's h; its
# self-attention is the h stream's (acl) or causal (iclr, CS-MLM).
VECO = (
    AttentionMask("veco_cross", masks.veco_cross, ExampleLayout.SEGMENT_PAIR),
    AttentionMask("veco_self", masks.mmlm, ExampleLayout.SEGMENT_PAIR),
    AttentionMask("veco_causal", masks.veco_causal, ExampleLayout.SEGMENT_PAIR),
)

# XLCo: each side of a translation pair attends only to itself (encoded alone).
XLCO = AttentionMask("xlco", masks.mmlm, ExampleLayout.SEGMENT_PAIR)

# Objective → every mask it runs, the main one first.
BY_OBJECTIVE: dict[str, tuple[AttentionMask, ...]] = {
    "mmlm": (MMLM,),
    "tlm": (TLM,),
    "camlm": (CAMLM,),
    "btmlm": (BTMLM_GENERATE, BTMLM),
    "veco": VECO,
    "veco_mono": VECO,
    "mrtd": (MMLM,),  # XLM-E's generator and discriminator attend as MLM does
    "trtd": (TLM,),
    "xlco": (XLCO,),
}


def choices() -> dict[str, tuple[str, AttentionMask]]:
    """Every name the masks CLI accepts → (the objective, the mask): an objective's name shows
    its main mask, a mask's name that mask; mask names win, so an objective named like one of
    its masks (btmlm) shows that mask."""
    by_objective = {name: (name, shown[0]) for name, shown in BY_OBJECTIVE.items()}
    by_mask: dict[str, tuple[str, AttentionMask]] = {}
    for name, shown in BY_OBJECTIVE.items():
        for mask in shown:
            by_mask.setdefault(mask.name, (name, mask))  # the first objective that runs it
    return {**by_objective, **by_mask}
