"""XLA flags that make the tests' CPU compiles cheap: a test's tiny model runs a few steps, so
compiling, not running, is most of its time. Set for the in-process tests by conftest.py and
for the commands tests run, but for those that run as a user would (the README's demos).

- `--xla_backend_optimization_level=0`: about a third less CPU per compile
  (test_task_heads + test_modern_encoder: 449 → 285 CPU-s).
- `--xla_cpu_use_fusion_emitters=false`: XLA's older elemental emitter for fusions, about half
  the remaining backend compile of a tiny train step (4.5 → 2.2 s here). XLA aborts the process
  on a flag it does not know, so it is set only where jaxlib's library names it.
- `--xla_cpu_parallel_codegen_split_count=1`: one LLVM module per program instead of pieces
  compiled side by side. At level 0 the pieces' set-up costs more than their parallel work:
  about 10% less CPU per train-step compile on 8 devices and 30% on one, 6% less CPU for
  test_modern_encoder + test_bert (191 → 179 CPU-s). At XLA's level the split pays (the same CPU,
  half the wall time), so `OPTIMIZED_COMPILE` keeps it.

`OPTIMIZED_COMPILE` keeps XLA's level, for the commands that run longer than they compile.
"""

import importlib.util
import mmap
import pathlib

FUSION_EMITTERS_OFF = "--xla_cpu_use_fusion_emitters=false"
ONE_CODEGEN_MODULE = "--xla_cpu_parallel_codegen_split_count=1"


def jaxlib_knows(flag: str) -> bool:
    """Whether jaxlib's XLA library holds the flag's name (its table of flags does)."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or spec.origin is None:
        return False
    library = pathlib.Path(spec.origin).parent / "libjax_common.so"
    if not library.is_file():
        return False
    name = flag.removeprefix("--").partition("=")[0].encode()
    with library.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return m.find(name) >= 0


def if_known(flag: str) -> str:
    """`flag` where jaxlib names it, else nothing: XLA aborts on a flag it does not know."""
    return flag if jaxlib_knows(flag) else ""


# For commands whose running outweighs their compiles (evaluation over every language): XLA's
# level kept (the fine-tuning command: 34 CPU-s, against 39 at XLA's defaults and 66 at -O0).
OPTIMIZED_COMPILE = if_known(FUSION_EMITTERS_OFF)
FAST_COMPILE = " ".join(
    filter(
        None,
        ("--xla_backend_optimization_level=0", OPTIMIZED_COMPILE, if_known(ONE_CODEGEN_MODULE)),
    )
)
