"""Attention-mask functions: materialisation, packing semantics, registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlpretrain import masks

# Two rows: [seg 1 ×3, seg 2 ×2, pad ×2] and [seg 1 ×6, pad ×1].
SEGMENTS = np.array([[1, 1, 1, 2, 2, 0, 0], [1, 1, 1, 1, 1, 1, 0]])


def hand_built_mask(segment_ids: np.ndarray) -> np.ndarray:
    batch, length = segment_ids.shape
    out = np.zeros((batch, 1, length, length), bool)
    for b in range(batch):
        for i in range(length):
            for j in range(length):
                out[b, 0, i, j] = segment_ids[b, i] == segment_ids[b, j]
    return out


@pytest.mark.parametrize("name", ["mmlm", "tlm"])
def test_materialize_matches_hand_built_mask(name):
    got = masks.materialize(masks.get(name), {"segment_ids": jnp.asarray(SEGMENTS)})
    assert got.shape == (2, 1, 7, 7)
    assert got.dtype == jnp.bool_
    np.testing.assert_array_equal(np.asarray(got), hand_built_mask(SEGMENTS))


def test_no_row_is_empty():
    got = np.asarray(masks.materialize(masks.mmlm, {"segment_ids": jnp.asarray(SEGMENTS)}))
    assert got.any(axis=-1).all()


def test_tlm_pair_sides_see_each_other_but_not_other_pairs():
    # <s> A </s></s> B </s> as segment 1 (sides 0/1), then a second pair as segment 2.
    meta = {
        "segment_ids": jnp.array([[1, 1, 1, 1, 2, 2, 2, 0]]),
        "side": jnp.array([[0, 0, 1, 1, 0, 1, 1, 0]]),
    }
    got = np.asarray(masks.materialize(masks.tlm, meta))[0, 0]
    assert got[0, 3] and got[3, 0]  # source ↔ target of the same pair
    assert not got[0, 5] and not got[5, 0]  # never across packed pairs


def test_cross_attention_meta_gives_rectangular_mask():
    q_meta = {"segment_ids": jnp.array([[1, 1, 2, 0]])}
    k_meta = {"segment_ids": jnp.array([[1, 2, 2, 2, 0, 0]])}
    got = np.asarray(masks.materialize(masks.mmlm, q_meta, k_meta))
    expected = q_meta["segment_ids"][0][:, None] == k_meta["segment_ids"][0][None, :]
    assert got.shape == (1, 1, 4, 6)
    np.testing.assert_array_equal(got[0, 0], np.asarray(expected))


def test_mask_fn_is_closed_over_under_jit():
    fn = jax.jit(lambda seg: masks.materialize(masks.mmlm, {"segment_ids": seg}))
    np.testing.assert_array_equal(np.asarray(fn(SEGMENTS)), hand_built_mask(SEGMENTS))


def test_get_unknown_lists_known_names():
    assert masks.get("mmlm") is masks.mmlm
    with pytest.raises(KeyError, match="mmlm.*tlm"):
        masks.get("nope")


def test_masks_cli_shows_what_the_objective_declarations_declare(monkeypatch, capsys):
    """One table (`masks.catalog`) says which masks each objective runs: the objectives'
    declarations read it and the CLI shows it, each mask laid out by its declared layout."""
    import json

    from xlpretrain import objectives
    from xlpretrain.masks import AttentionMask, ExampleLayout, catalog
    from xlpretrain.masks import __main__ as cli

    assert set(catalog.BY_OBJECTIVE) == set(objectives.REGISTRY)
    for name, objective in objectives.REGISTRY.items():
        assert objective.masks == catalog.BY_OBJECTIVE[name], name
    declared = {m.name for o in objectives.REGISTRY.values() for m in o.masks}
    assert set(catalog.choices()) == set(objectives.REGISTRY) | declared
    assert catalog.choices()["btmlm"][1].name == "btmlm"  # the mask named like the objective
    assert catalog.choices()["veco"][1].name == "veco_cross"  # else the objective's first mask
    causal = AttentionMask("toy_causal", masks.veco_causal, ExampleLayout.SEGMENTS)
    monkeypatch.setitem(catalog.BY_OBJECTIVE, "toy", (causal,))
    cli.main(["--objective", "toy", "--example", "a b", "--json"])
    info = json.loads(capsys.readouterr().out)
    assert (info["objective"], info["mask"]) == ("toy", "toy_causal")
    assert info["allowed"] == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


def test_the_masks_cli_imports_no_objective_and_no_model():
    """Showing a mask needs the mask functions alone: not the objectives' losses, the model
    (Flax) or the training code."""
    import subprocess
    import sys

    script = (
        "import runpy, sys\n"
        "sys.argv = ['masks', '--objective', 'btmlm', '--example', 'a b ||| c', '--json']\n"
        "try:\n"
        "    runpy.run_module('xlpretrain.masks', run_name='__main__')\n"
        "except SystemExit as stop:\n"
        "    assert not stop.code, stop.code\n"
        "heavy = ('xlpretrain.objectives', 'xlpretrain.model', 'xlpretrain.training', 'flax')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "[]"


def test_masks_cli_labels_its_axes_and_says_where_the_picture_went(tmp_path, capsys):
    from xlpretrain.masks import __main__ as cli

    picture = tmp_path / "camlm.png"
    cli.main(["--objective", "camlm", "--example", "a b ||| c", "--png", str(picture)])
    out, err = capsys.readouterr()
    assert "rows (queries) attend to the columns (keys) marked '#'" in out
    assert " query " in out.splitlines()[1] and " key 0 1 2" in out.splitlines()[1]
    assert picture.stat().st_size > 0 and f"wrote {picture}" in err
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m xlpretrain.masks ")


def test_the_grid_names_each_side_and_numbers_columns_past_ten_readably():
    """Side labels whole ("placeholder", not "pla"); past ten tokens a column's number is
    written downwards (tens above units), over the column it numbers."""
    from xlpretrain import objectives
    from xlpretrain.masks.show import describe, format_text

    info = describe(objectives.get("tlm").masks[0], "a b c d e f ||| g h i j k l")
    tens, units, *rows = format_text(info).splitlines()[1:19]
    assert len(rows) == len(info["tokens"]) == 16
    assert "query" in units and " source " in rows[0] and " target " in rows[-1]
    first = len(rows[0]) - (2 * 16 - 1)  # where the cells start
    for column in range(16):
        where = first + 2 * column
        assert (tens[where] + units[where]).strip() == str(column), column
        assert all(row[where] in "#." for row in rows)
    placeholder = describe(objectives.get("btmlm").masks[0], "a b c d e f g", ratio=0.3)
    assert format_text(placeholder).splitlines()[-1].split()[2] == "placeholder"
