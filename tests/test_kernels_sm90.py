"""The fused attention compiled for an H100 (sm_90a) on this CPU host, as XLA:GPU compiles it
for the GPU: Pallas→Triton lowering, Triton's passes, ptxas and the SM's limits. Interpret mode
(tests/test_flash_attention.py) checks the arithmetic; this checks that the GPU accepts the
kernels, and that at the default tiles no kernel spills registers to local memory or needs more
registers than docs/performance.md's table states for it (what the defaults were chosen on).

Needs the CUDA plugin and ptxas, not a GPU: ``pip install -e ".[gpu-compile]"``. Without them
the module is skipped, unless XLPRETRAIN_REQUIRE_GPU_COMPILE=1 (set by .ci/run), which makes
their absence a failure. ``pytest -k sm90`` runs these alone.
"""

import dataclasses
import functools
import os
import pathlib
import re

import jax
import jax.numpy as jnp
import pytest

from xlpretrain import masks
from xlpretrain.model import MaskedLM, ModelConfig
from xlpretrain.model.kernels import flash, gpu_compile
from xlpretrain.parallel import gpu_targets

try:
    gpu_targets.topology_devices("h100:1")
except ValueError as error:
    if os.environ.get("XLPRETRAIN_REQUIRE_GPU_COMPILE") == "1":
        raise
    pytest.skip(str(error), allow_module_level=True)

Case = gpu_compile.FlashCase
CASES = gpu_compile.checked_cases()
PERFORMANCE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "performance.md"


@functools.cache
def documented() -> dict[tuple[str, str], tuple[str, int]]:
    """{(case, kernel): (tile, registers)} from docs/performance.md's table of the defaults
    (`python -m xlpretrain.aot --kernels h100`)."""
    rows = re.findall(
        r"^\| (\S+) \| (_\w+_kernel) \| (\S+) \| (\d+) \|", PERFORMANCE.read_text(), re.MULTILINE
    )
    return {(case, kernel): (tile, int(registers)) for case, kernel, tile, registers in rows}


@functools.cache
def mask_rule(case: Case) -> str:
    """The case's mask as its kernels compute it: the jaxpr of its mask function on the token
    metadata a kernel hands it (`FlashCase.abstract_args`' and each token's index). The kernels
    use a mask only by calling it (`flash.attention`), so cases alike but for masks of one rule
    compile to the same kernels."""
    meta = case.abstract_args()[-1]
    meta = {**meta, "index": meta["segment_ids"]}
    return str(jax.make_jaxpr(case.mask_fn())(meta, meta))


def same_rule(case: Case) -> list[str]:
    """The registered masks whose rule is the case's mask's, in the case's other settings."""
    rule = mask_rule(case)
    return [m for m in masks.MASKS if mask_rule(dataclasses.replace(case, mask=m)) == rule]


@functools.cache
def _compiled(case: Case, tiles: flash.Tiles | None):
    return gpu_compile.compile_for_gpu(case.gradient(tiles), case.abstract_args())


def compiled(case: Case, tiles: flash.Tiles | None = None):
    """The case's gradient program compiled for an H100 and its kernels' reports, compiled
    once for all masks of the case's rule: TLM's and BTMLM's are MMLM's, and their cases
    compile to byte-identical PTX (checked for the 4 such cases of 26, about 10 CPU-s each)."""
    return _compiled(dataclasses.replace(case, mask=min(same_rule(case))), tiles)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_sm90_every_kernel_compiles_without_spills_at_the_default_tiles(case):
    """No spill, shared memory the SM has, and registers within the documented budget: ptxas
    caps a thread at 255 and spills past it, so a kernel that needs more registers than the
    tiles were chosen at is nearer spilling and holds fewer warps per SM; re-measure and update
    the table, or shrink its tile."""
    _, reports = compiled(case)
    assert sorted(r.name for r in reports) == sorted(gpu_compile.FLASH_KERNELS)
    limit = gpu_targets.GPUS["h100"].shared_memory_per_block_optin
    tiles = flash.default_tiles(jnp.dtype(case.dtype), case.head_dim).fitted(
        case.length, case.length
    )
    for report in reports:
        assert report.spill_stores == 0 and report.spill_loads == 0, f"{case}: {report}"
        assert 0 < report.shared_memory <= limit, f"{case}: {report}"
        tile, budget = documented()[str(case), report.name]
        assert str(getattr(tiles, report.name.strip("_").removesuffix("_kernel"))) == tile
        assert report.registers <= budget, (
            f"{case}: {report}; docs/performance.md states {budget} at {tile}"
        )


def test_sm90_masks_share_kernels_only_where_their_rule_is_the_same():
    """The sharing above holds where the masks compute the same rule, and a mask whose rule
    differs in any way is compiled on its own."""
    case = CASES[0]
    assert sorted(same_rule(case)) == ["btmlm", "mmlm", "tlm"]
    assert mask_rule(dataclasses.replace(case, mask="camlm")) != mask_rule(case)
    windowed = dataclasses.replace(case, window=64)
    assert mask_rule(windowed) != mask_rule(case)


def test_sm90_tiles_that_spill_are_reported():
    """The check above can fail: 128 × 128 tiles (the old default) spill in every kernel, even
    with the plainest mask (no bias, no dropout: the case ptxas builds fastest, about 10 s)."""
    _, reports = compiled(Case("mmlm", "none", "bfloat16", 512, 0.0), flash.Tiles.uniform(128, 128))
    assert all(r.spill_stores > 0 and r.registers == 255 for r in reports), reports


def test_sm90_tiles_larger_than_shared_memory_are_refused():
    """256 × 256 tiles need more shared memory than an H100 SM has: interpret mode runs them,
    the GPU compile refuses them. dK/dV's 256 KiB is what is refused; the other kernels keep
    their default tiles, as at 256 × 256 they spill so much that ptxas takes 40 CPU-seconds
    over them before the refusal."""
    case = Case("mmlm", "none", "bfloat16", 512, 0.0)
    with pytest.raises(jax.errors.JaxRuntimeError, match="Shared memory size limit exceeded"):
        gpu_compile.compile_for_gpu(
            case.gradient(flash.Tiles.parse("dkv=256x256")), case.abstract_args()
        )


def test_sm90_the_kernel_platform_is_part_of_the_traced_function():
    """A forward traced for the CPU (interpret mode) is not what a GPU compile gets: the
    platform lives in the model config, a static argument, so the GPU build traces anew and
    its program holds the Triton kernels."""
    config = ModelConfig(vocab_size=64, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=32,
                         max_positions=40, attention_impl="pallas")  # fmt: skip
    assert config.kernel_platform == "cpu"

    def apply(config, params, tokens):
        return MaskedLM(config).apply(params, tokens, tokens + 2, mask_fn=masks.mmlm,
                                      mask_meta={"segment_ids": jnp.ones_like(tokens)})  # fmt: skip

    forward = jax.jit(apply, static_argnums=0)
    tokens = jnp.ones((2, 16), jnp.int32)
    params = jax.eval_shape(
        lambda: MaskedLM(config).init(jax.random.key(0), tokens, tokens + 2, mask_fn=masks.mmlm,
                                      mask_meta={"segment_ids": tokens})
    )  # fmt: skip
    on_cpu = forward.trace(config, params, tokens).lower().as_text()
    assert "triton" not in on_cpu
    gpu_config = dataclasses.replace(config, kernel_platform="gpu")
    lowered = forward.trace(gpu_config, params, tokens).lower(lowering_platforms=("cuda",))
    assert lowered.as_text().count("__gpu$xla.gpu.triton") >= 1
