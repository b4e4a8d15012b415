"""The GPU suite's profile read on a CPU: a real `jax.profiler` trace of a small jitted function
(the host's XLA thunks carry their HLO op's name) and a synthetic GPU trace (kernels on the
device's streams; the host's launches and the derived lines not counted)."""

import jax
import jax.numpy as jnp
import pytest

from xlpretrain.bench import profile


def _step(state, x, w):
    y = jnp.tanh(x @ w) @ w.T
    return state + jnp.sin(y).sum() + jnp.exp(x).mean(), y.max()


def test_a_cpu_trace_of_a_jitted_step_reads_into_its_ops_with_their_sources(tmp_path):
    args = (jnp.zeros(()), jnp.ones((128, 128)), jnp.full((128, 128), 0.01))
    compiled = jax.jit(_step, donate_argnums=0).lower(*args).compile()
    hlo_text = compiled.as_text()
    state, *_ = compiled(*args)  # warmed up: the trace holds steps
    args = (state, *args[1:])
    result = profile.profile_compiled(compiled, hlo_text, args, 3, tmp_path / "trace")
    assert result["trace"].endswith(".trace.json.gz")
    assert result["events_from"] == "host" and result["module"].startswith("jit__step")
    ops = result["top_ops"]
    assert ops and len(ops) <= profile.TOP_OPS
    shares = [op["share"] for op in ops]
    assert all(s > 0 for s in shares) and sum(shares) <= 1 + 1e-9
    assert shares == sorted(shares, reverse=True)  # longest first
    assert result["device_ms_per_step"] > 0
    assert all(op["launches_per_step"] == 1 for op in ops)  # each op once a step
    _, hlo = profile.hlo_ops(hlo_text)
    assert all(op["hlo_op"] in hlo for op in ops)
    sources = " ".join(op["source"] for op in ops)
    assert "jit(_step)/" in sources and ("dot_general" in sources or "tanh" in sources)
    table = profile.markdown_table(result)
    assert len(table) == 2 + len(ops) and all(row.count("|") == 8 for row in table[2:])
    # The same trace's .xplane.pb (what a JAX that writes no JSON leaves) reads the same.
    (xplane,) = (tmp_path / "trace").glob("plugins/profile/*/*.xplane.pb")
    again = profile.top_ops(profile.load_trace(xplane), hlo_text, 3)
    assert [op["hlo_op"] for op in again["top_ops"]] == [op["hlo_op"] for op in ops]
    assert again["device_ms_per_step"] == pytest.approx(result["device_ms_per_step"], rel=1e-6)


HLO = """HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%fused_exp (param_0: f32[8]) -> f32[8] {
  %param_0 = f32[8]{0} parameter(0)
  ROOT %exp.1 = f32[8]{0} exponential(%param_0), metadata={op_name="jit(step)/jvp(exp)"}
}

ENTRY %main.9 (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %gemm.3 = (f32[8]{0}, s8[64]{0}) custom-call(%p, %p), custom_call_target="__cublas$gemm", \
metadata={op_name="jit(step)/dot_general" source_file="x.py"}
  %gte = f32[8]{0} get-tuple-element(%gemm.3), index=0
  ROOT %loop_exp_fusion = f32[8]{0} fusion(%gte), kind=kLoop, calls=%fused_exp
}
"""


def _meta(pid, name, tid=None):
    kind = "process_name" if tid is None else "thread_name"
    return {"ph": "M", "pid": pid, **({"tid": tid} if tid is not None else {}), "name": kind,
            "args": {"name": name}}  # fmt: skip


def _op(pid, tid, op, dur, module="jit_step"):
    return {"ph": "X", "pid": pid, "tid": tid, "ts": 0, "dur": dur, "name": f"kernel_{op}",
            "args": {"hlo_op": op, "hlo_module": module}}  # fmt: skip


def test_a_gpu_trace_counts_the_device_streams_kernels_per_op():
    """Kernels on two streams, summed per HLO op (the gemm's two launches as one op); the host's
    launch events, another module's kernel and a derived "XLA Modules" line are not counted;
    a fusion without metadata takes its fused root's source."""
    trace = {
        "traceEvents": [
            _meta(1, "/host:CPU"),
            _meta(1, "python", tid=1),
            _meta(2, "/device:GPU:0"),
            _meta(2, "Stream #7(Compute)", tid=7),
            _meta(2, "Stream #8(Compute)", tid=8),
            _meta(2, "XLA Modules", tid=9),
            _op(1, 1, "gemm.3", 500.0),  # the host's launch: not device time
            _op(2, 7, "gemm.3", 60.0),
            _op(2, 8, "gemm.3", 20.0),
            _op(2, 7, "loop_exp_fusion", 20.0),
            _op(2, 7, "gemm.3", 900.0, module="jit_other"),
            _op(2, 9, "loop_exp_fusion", 1000.0),
            {"ph": "X", "pid": 2, "tid": 7, "ts": 0, "dur": 5.0, "name": "memcpy"},
        ]
    }
    result = profile.top_ops(trace, HLO, steps=2)
    assert (result["module"], result["events_from"]) == ("jit_step", "device")
    assert result["device_ms_per_step"] == 0.05
    assert result["top_ops"] == [
        {"hlo_op": "gemm.3", "kind": "custom-call __cublas$gemm", "ms_per_step": 0.04,
         "share": 0.8, "launches_per_step": 1.0, "source": "jit(step)/dot_general"},
        {"hlo_op": "loop_exp_fusion", "kind": "fusion kLoop", "ms_per_step": 0.01,
         "share": 0.2, "launches_per_step": 0.5, "source": "jit(step)/jvp(exp)"},
    ]  # fmt: skip
    # The derived "XLA Ops" line repeats the streams' kernels: counted only without them.
    ops_line = [_meta(2, "XLA Ops", tid=10), _op(2, 10, "loop_exp_fusion", 30.0)]
    both = profile.top_ops({"traceEvents": trace["traceEvents"] + ops_line}, HLO, steps=2)
    assert both == result
    no_streams = [e for e in trace["traceEvents"] if e.get("tid") not in (7, 8)] + ops_line
    derived = profile.top_ops({"traceEvents": no_streams}, HLO, steps=1)
    assert [op["hlo_op"] for op in derived["top_ops"]] == ["loop_exp_fusion"]
    assert derived["top_ops"][0]["share"] == 1.0
