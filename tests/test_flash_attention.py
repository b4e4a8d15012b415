"""The fused mask-function kernel (Pallas, interpret mode on CPU) against the XLA reference.

Float32, random inputs, every registered mask on packed rows with padding and a length that
is not a multiple of the tiles, the relative-position score modification (bucketed and XLM-E's
gated form), dropout; forward and gradients of every input and parameter.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlpretrain import masks
from xlpretrain.bench import kernel_check
from xlpretrain.model import kernels, relative_position
from xlpretrain.model.kernels import block_mask, flash
from xlpretrain.model.relative_position import RelativeBias
from xlpretrain.training.config import DEFAULT_LOGICAL_AXIS_RULES as RULES

B, L, H, D = 2, 37, 2, 16  # 37: three 16-tiles, the last one padded
BLOCK = 16
TILES = flash.Tiles.uniform(BLOCK, BLOCK)
PLATFORM = kernels.host_platform()  # interpret mode on CPU; Triton where a GPU runs the tests
BUCKETS, MAX_DISTANCE = 32, 128


def packed_meta(seed: int = 0) -> dict[str, jax.Array]:
    """Two rows: row 0 packs a 17-token and a 16-token unit then 4 padding tokens; row 1 packs
    a 17-token unit and 13 tokens, then padding. Sides alternate in runs, ~40% masked, a few
    placeholders (side 2) and a tag (side 4) so every mask has something to tell apart."""
    rng = np.random.default_rng(seed)
    segment = np.zeros((B, L), np.int32)
    segment[:, :17], segment[0, 17:33], segment[1, 17:30] = 1, 2, 2
    side = np.zeros((B, L), np.int32)
    side[:, 9:17], side[:, 26:33] = 1, 1
    side[0, 14:16], side[1, 28:30], side[0, 13] = 2, 2, 4
    positions = np.zeros((B, L), np.int32)
    for b in range(B):
        for s in (1, 2):
            where = np.flatnonzero(segment[b] == s)
            positions[b, where] = 2 + np.arange(len(where))
    meta = {
        "segment_ids": segment,
        "pair_ids": np.where(segment > 0, 1, 0).astype(np.int32),
        "side": side,
        "positions": positions,
        "is_masked": (rng.random((B, L)) < 0.4).astype(np.int32) * (segment > 0),
    }
    return {k: jnp.asarray(v) for k, v in meta.items()}


def qkv(seed: int = 1):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.normal(size=(B, L, H, D)), jnp.float32) for _ in range(3))


# Plain XLA with the mask, bias and dropout materialised (the GPU suite checks against it too).
reference = kernel_check.reference_attention


def fused(q, k, v, mask_fn, meta, tiles=TILES, **kwargs):
    return flash.attention(
        q, k, v, mask_fn=mask_fn, q_meta=meta, k_meta=meta, tiles=tiles, platform=PLATFORM, **kwargs
    )


def assert_same_value_and_grads(f_fused, f_ref, args, atol=2e-5):
    """Forward, and the gradients of a random projection of the output w.r.t. every arg."""
    with jax.default_matmul_precision("float32"):
        out, ref = f_fused(*args), f_ref(*args)
        np.testing.assert_allclose(out, ref, atol=atol, rtol=1e-5)
        cotangent = jnp.asarray(np.random.default_rng(7).normal(size=out.shape), jnp.float32)
        argnums = tuple(range(len(args)))
        got = jax.grad(lambda *a: jnp.sum(f_fused(*a) * cotangent), argnums)(*args)
        want = jax.grad(lambda *a: jnp.sum(f_ref(*a) * cotangent), argnums)(*args)
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, atol=atol * 10, rtol=1e-4, err_msg=f"gradient {index}")


@pytest.mark.parametrize("name", sorted(masks.MASKS))
def test_every_mask_matches_the_xla_reference(name):
    meta, mask_fn = packed_meta(), masks.get(name)
    args = qkv()
    assert_same_value_and_grads(
        lambda q, k, v: fused(q, k, v, mask_fn, meta),
        lambda q, k, v: reference(q, k, v, mask_fn, meta),
        args,
    )


def gated_scale(q, u, v, w):
    return relative_position.gate_scale(q, u, v, w)


@pytest.mark.parametrize("gated", [False, True], ids=["bucketed", "gated"])
def test_relative_position_score_modification(gated):
    """The bias is evaluated per tile from positions; its table and XLM-E's gate parameters
    get the reference's gradients."""
    meta, mask_fn = packed_meta(), masks.camlm
    rng = np.random.default_rng(3)
    table = jnp.asarray(rng.normal(size=(BUCKETS, H)), jnp.float32)
    u, v_gate = (jnp.asarray(rng.normal(size=(H, D)) * 0.3, jnp.float32) for _ in range(2))
    w = jnp.asarray(0.7, jnp.float32)

    def with_bias(attend):
        def f(q, k, v, table, u, v_gate, w):
            scale = relative_position.gate_scale(q, u, v_gate, w) if gated else None
            bias = RelativeBias(table, scale, BUCKETS, MAX_DISTANCE)
            return attend(q, k, v, bias)

        return f

    args = (*qkv(), table, u, v_gate, w)
    assert_same_value_and_grads(
        with_bias(lambda q, k, v, bias: fused(q, k, v, mask_fn, meta, bias=bias)),
        with_bias(lambda q, k, v, bias: reference(q, k, v, mask_fn, meta, bias=bias)),
        args,
        atol=5e-5,
    )


def dense_keep(seed, rate, row_offset=0):
    """The kernel's dropout decisions for every (row, head, query, key), from the same hash."""
    rows = (row_offset + jnp.arange(B))[:, None, None, None]
    heads = jnp.arange(H)[None, :, None, None]
    q_idx = jnp.arange(L)[None, None, :, None]
    k_idx = jnp.arange(L)[None, None, None, :]
    return flash.dropout_keep(seed, rows * H + heads, q_idx, k_idx, rate)


def test_dropout_matches_the_reference_with_the_same_decisions():
    meta, mask_fn, rate = packed_meta(), masks.tlm, 0.25
    rng = jax.random.key(5)
    seed = jax.random.randint(rng, (), 0, jnp.iinfo(jnp.int32).max)
    keep = dense_keep(seed, rate)
    assert abs(float(keep.mean()) - (1 - rate)) < 0.02
    assert_same_value_and_grads(
        lambda q, k, v: fused(q, k, v, mask_fn, meta, dropout_rate=rate, dropout_rng=rng),
        lambda q, k, v: reference(q, k, v, mask_fn, meta, keep=keep, rate=rate),
        qkv(),
    )


def test_dropout_does_not_depend_on_how_rows_are_split():
    """Rows processed apart with their global offset draw what the whole batch draws, so a
    sharded step drops the same weights as one device."""
    meta, rng = packed_meta(), jax.random.key(9)
    q, k, v = qkv()
    whole = fused(q, k, v, masks.mmlm, meta, dropout_rate=0.5, dropout_rng=rng)
    for row in range(B):
        part = flash.attention(
            q[row : row + 1], k[row : row + 1], v[row : row + 1],
            mask_fn=masks.mmlm,
            q_meta={f: x[row : row + 1] for f, x in meta.items()},
            k_meta={f: x[row : row + 1] for f, x in meta.items()},
            dropout_rate=0.5, dropout_rng=rng, row_offset=row, tiles=TILES, platform=PLATFORM,
        )  # fmt: skip
        np.testing.assert_allclose(part[0], whole[row], atol=1e-6)


def test_bfloat16_inputs_stay_close_to_the_float32_reference():
    meta = packed_meta()
    q, k, v = qkv()
    out = fused(*(x.astype(jnp.bfloat16) for x in (q, k, v)), masks.camlm, meta)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        out.astype(jnp.float32), reference(q, k, v, masks.camlm, meta), atol=0.05
    )


def test_tiles_are_classified_exactly_and_excluded_ones_skipped():
    """EMPTY tiles hold no allowed pair and FULL tiles no excluded one (padding included), and
    packed rows do leave tiles to skip."""
    meta = block_mask.pad_meta(packed_meta(), 48)
    for name, mask_fn in masks.MASKS.items():
        tiles = np.asarray(
            block_mask.classify_tiles(
                mask_fn, meta, meta, q_len=L, k_len=L, block_q=BLOCK, block_k=BLOCK
            )
        )
        allowed = np.asarray(masks.materialize(mask_fn, meta))[:, 0].copy()
        allowed[:, :, L:] = False
        for b, i, j in np.ndindex(*tiles.shape):
            tile = allowed[b, i * BLOCK : (i + 1) * BLOCK, j * BLOCK : (j + 1) * BLOCK]
            real_rows = tile[: max(0, min(BLOCK, L - i * BLOCK))]
            expected = (
                block_mask.FULL
                if real_rows.size == tile.size and tile.all()
                else block_mask.PARTIAL
                if tile.any()
                else block_mask.EMPTY
            )
            assert tiles[b, i, j] == expected, (name, b, i, j)
    skipped = block_mask.classify_tiles(
        masks.mmlm, meta, meta, q_len=L, k_len=L, block_q=BLOCK, block_k=BLOCK
    )
    assert float(block_mask.skipped_fraction(skipped)) > 0.2


def test_a_query_that_may_see_nothing_outputs_zero():
    meta = packed_meta()
    q, k, v = qkv()
    out = fused(q, k, v, lambda q, k: (q["index"] > 3) & (k["segment_ids"] > 0), meta)
    np.testing.assert_array_equal(out[:, :4], 0.0)
    assert np.isfinite(np.asarray(out)).all()


def test_tile_settings_are_checked_and_parsed():
    with pytest.raises(ValueError, match="block_q must be a power of two, got 24"):
        flash.KernelTiles(24, 64)
    with pytest.raises(ValueError, match="num_warps must be a power of two"):
        flash.Tiles.parse("dq=64x64:w3")
    with pytest.raises(ValueError, match="expected KERNEL=BQxBK"):
        flash.Tiles.parse("backward=64x64")
    with pytest.raises(ValueError, match="expected BQxBK"):
        flash.Tiles.parse("dq=64by64")
    tiles = flash.Tiles.parse("dq=32x64:w8:s3, dkv=64x32")
    assert tiles.forward == flash.default_tiles(jnp.bfloat16).forward
    assert tiles.dq == flash.KernelTiles(32, 64, num_warps=8, num_stages=3)
    assert tiles.dkv == flash.KernelTiles(64, 32)
    assert flash.Tiles.parse(str(tiles)) == tiles


def test_kernels_with_different_tiles_match_the_reference():
    """Forward, dQ and dK/dV each on its own tile shape (rows padded to the largest)."""
    meta, tiles = packed_meta(), flash.Tiles.parse("forward=32x16 dq=16x32 dkv=32x32")
    table = jnp.asarray(np.random.default_rng(3).normal(size=(BUCKETS, H)), jnp.float32)

    def with_bias(attend):
        return lambda q, k, v, table: attend(q, k, v, RelativeBias(table, None, BUCKETS, 128))

    assert_same_value_and_grads(
        with_bias(lambda q, k, v, b: fused(q, k, v, masks.camlm, meta, tiles, bias=b)),
        with_bias(lambda q, k, v, b: reference(q, k, v, masks.camlm, meta, bias=b)),
        (*qkv(), table),
        atol=5e-5,
    )


def test_sharded_step_with_the_fused_kernel_equals_one_device():
    """Loss and gradients of a CAMLM step with XLM-E's gated bias and both dropouts: the
    kernel under shard_map on data=2 × fsdp=2 × tensor=2 (parameters sharded by the default
    rules, heads over tensor) equals the kernel on one device, and the sharded program really
    is a shard_map. (Also guards the LM head's replicated dense kernel: sharded over tensor,
    XLA got its gradient wrong.)"""
    import flax.linen as nn

    from xlpretrain.bench.step import synthetic_batch
    from xlpretrain.data.pretraining.row_kinds import TranslationPairs
    from xlpretrain.data.pretraining.streams import PARALLEL, StreamSpec
    from xlpretrain.model import MaskedLM, ModelConfig, init_params
    from xlpretrain.objectives import ernie_m
    from xlpretrain.parallel.sharding import (
        batch_sharding,
        logical_shardings,
        make_mesh,
        under_mesh,
    )

    config = ModelConfig(
        vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, max_positions=40,
        relative_position="gated", attention_impl="pallas",
    )  # fmt: skip
    model = MaskedLM(config)
    boxed = init_params(config, jax.random.key(0))
    params = nn.unbox(boxed)
    stream = StreamSpec(TranslationPairs(), {PARALLEL: 0.3}, max_length=24)
    batch = synthetic_batch(8, stream, config.vocab_size, np.random.default_rng(0))
    batch["side"][:, 11:] = 1
    batch["segment_ids"][:, -3:] = batch["is_masked"][:, -3:] = 0  # some padding

    def loss(params, batch):
        return ernie_m.camlm(params, batch, jax.random.key(1), model)[0]

    grad_fn = jax.value_and_grad(loss)
    one_device = jax.jit(grad_fn)(params, batch)
    mesh = make_mesh(2, 2, 2)
    shardings = logical_shardings(boxed, mesh, RULES)
    sharded_fn = under_mesh(mesh, RULES, grad_fn)
    assert "shard_map" in str(jax.make_jaxpr(sharded_fn)(params, batch))
    sharded = jax.jit(sharded_fn, in_shardings=(shardings, batch_sharding(mesh, RULES)))(
        params, batch
    )
    np.testing.assert_allclose(sharded[0], one_device[0], rtol=1e-5)
    flat_sharded = jax.tree_util.tree_leaves_with_path(sharded[1])
    for (path, got), want in zip(flat_sharded, jax.tree.leaves(one_device[1]), strict=True):
        np.testing.assert_allclose(
            got, want, atol=1e-6, rtol=1e-4, err_msg=jax.tree_util.keystr(path)
        )


@pytest.mark.parametrize("mesh_shape", [(4, 1, 2), (2, 2, 2)])
def test_heads_over_tensor_under_shard_map_equal_one_device(mesh_shape):
    """Attention alone with heads split over ``tensor`` (and dropout, whose decisions follow
    the global head): values and input gradients of one device."""
    from xlpretrain.model.attention import dot_product_attention
    from xlpretrain.parallel.sharding import batch_sharding, make_mesh, under_mesh

    meta = {f: jnp.tile(x, (4, 1)) for f, x in packed_meta().items()}
    q, k, v = (jnp.tile(x, (4, 1, 1, 1)) for x in qkv())
    cotangent = jnp.asarray(np.random.default_rng(3).normal(size=q.shape), jnp.float32)

    def f(q, k, v):
        out = dot_product_attention(
            q, k, v, mask_fn=masks.camlm, q_meta=meta, k_meta=meta, impl="pallas",
            deterministic=False, dropout_rate=0.3, dropout_rng=jax.random.key(0), platform=PLATFORM,
        )  # fmt: skip
        return jnp.sum(out * cotangent)

    grad_fn = jax.value_and_grad(f, argnums=(0, 1, 2))
    want = jax.jit(grad_fn)(q, k, v)
    mesh = make_mesh(*mesh_shape)
    rows = batch_sharding(mesh, RULES)
    got = jax.jit(under_mesh(mesh, RULES, grad_fn), in_shardings=(rows,) * 3)(q, k, v)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for g, w in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)
