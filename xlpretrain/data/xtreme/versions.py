"""The versions of the benchmark, XTREME and XTREME-R: each task's test languages (evaluate.py's
`XTREME_TASK2LANGS` and `XTREME_R_TASK2LANGS`, in the order it writes them) and the groups of
tasks its scores average. The one statement of them: the layouts (`layout.task_languages`),
the run's config and the scorer read them here."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Version:
    """A version of the benchmark: its tasks' languages and its groups of tasks."""

    languages: dict[str, tuple[str, ...]]  # every task, in the order evaluate.py writes them
    groups: dict[str, tuple[str, ...]]


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split(",")) if text else ()


_XNLI = _split("ar,bg,de,el,en,es,fr,hi,ru,sw,th,tr,ur,vi,zh")
_PANX = (
    "ar,he,vi,id,jv,ms,tl,eu,ml,ta,te,af,nl,en,de,el,bn,hi,mr,ur,fa,fr,"
    "it,pt,es,bg,ru,ja,ka,ko,th,sw,yo,my,zh,kk,tr,et,fi,hu"
)
_UDPOS = (
    "af,ar,bg,de,el,en,es,et,eu,fa,fi,fr,he,hi,hu,id,it,ja,kk,ko,mr,"
    "nl,pt,ru,ta,te,th,tl,tr,ur,vi,yo,zh"
)
_TATOEBA = (
    "ar,he,vi,id,jv,tl,eu,ml,ta,te,af,nl,de,el,bn,hi,mr,ur,fa,fr,it,"
    "pt,es,bg,ru,ja,ka,ko,th,sw,zh,kk,tr,et,fi,hu"
)
_XQUAD = "en,es,de,el,ru,tr,ar,vi,th,zh,hi"
_MLQA = _split("en,es,de,ar,hi,vi,zh")
_TYDIQA = _split("en,ar,bn,fi,id,ko,ru,sw,te")

VERSIONS: dict[str, Version] = {
    "xtreme": Version(
        languages={
            "pawsx": _split("de,en,es,fr,ja,ko,zh"),
            "xnli": _XNLI,
            "panx": _split(_PANX),
            "udpos": _split(_UDPOS),
            "bucc2018": _split("de,fr,ru,zh"),
            "tatoeba": _split(_TATOEBA),
            "xquad": _split(_XQUAD),
            "mlqa": _MLQA,
            "tydiqa": _TYDIQA,
        },
        groups={
            "classification": ("pawsx", "xnli"),
            "tagging": ("udpos", "panx"),
            "qa": ("xquad", "mlqa", "tydiqa"),
            "retrieval": ("bucc2018", "tatoeba"),
        },
    ),
    # XTREME-R drops PAWS-X and BUCC, adds XCOPA, LAReQA and Mewsli-X, and languages to
    # UD-POS, PAN-X, Tatoeba and XQuAD.
    "xtreme-r": Version(
        languages={
            "xnli": _XNLI,
            "panx": _split(_PANX + ",qu,pl,uk,az,lt,pa,gu,ro"),
            "udpos": _split(_UDPOS + ",lt,pl,uk,wo,ro"),
            "tatoeba": _split(_TATOEBA + ",az,lt,pl,uk,ro"),
            "xcopa": _split("et,ht,id,it,qu,sw,ta,th,tr,vi,zh"),
            "lareqa": (),
            "mewslix": _split("ar,de,en,es,fa,ja,pl,ro,ta,tr,uk"),
            "xquad": _split(_XQUAD + ",ro"),
            "mlqa": _MLQA,
            "tydiqa": _TYDIQA,
        },
        groups={
            "classification": ("xnli", "xcopa"),
            "tagging": ("udpos", "panx"),
            "qa": ("xquad", "mlqa", "tydiqa"),
            "retrieval": ("tatoeba", "mewslix"),
            "multi_choice": ("xcopa",),
        },
    ),
}
