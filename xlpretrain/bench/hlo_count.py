"""What a compiled step does, counted from its optimized HLO text: matmul FLOPs, memory traffic,
kernel launches, random-bit kernels and f32↔bf16 converts, each weighted by how often it runs.

XLA's own ``cost_analysis`` counts a while loop's body once (a scanned 12-layer encoder as one
layer) and returns nothing for a deviceless GPU compile, so the census reads the program
itself. The definitions, the same for every step compared:

- **executed**: the entry computation, and what it runs: a ``while``'s body as many times as its
  ``known_trip_count`` (its condition once more), ``call`` and ``conditional`` targets once each
  (every branch, so a conditional over-counts).
- **launch**: an instruction of an executed computation that does work on the device: fusions,
  custom calls (cuBLAS, cuDNN, Triton), copies, collectives; not parameters, constants, tuples,
  ``get-tuple-element``, ``bitcast``, control flow, nor an async op's ``-done`` half.
- **FLOPs**: 2 · output elements · contracted size for every ``dot`` (top level or inside a
  fusion: XLA's Triton GEMMs) and cuBLAS GEMM custom call; attention custom calls by formula
  (cuDNN: forward 4·B·H·Lq·Lk·D, backward 10·B·H·Lq·Lk·D, its recomputation of the scores
  included; the fused kernel's by its own kernel names, ``ATTENTION_KERNEL_UNITS``).
  Elementwise work is not counted.
- **traffic**: operand plus output bytes of every launch, except that a slice, dynamic slice or
  gather reads only what it selects, an in-place dynamic-update-slice or scatter writes only its
  update (the buffer it updates is neither read nor written whole), and a custom call's trailing
  ``s8``/``u8`` scratch buffer is not counted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

DTYPE_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "s4": 0.5, "u4": 0.5, "token": 0,
}  # fmt: skip
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([\d,]*)\]")
_HEADER = re.compile(r"^(ENTRY )?%?([^\s(]+) \(.*\) -> .*\{$")
_COMMENT = re.compile(r"/\*.*?\*/")
NOT_LAUNCHED = {
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional",
    "call", "after-all", "add-dependency", "opt-barrier", "partition-id", "replica-id",
    "domain", "get-dimension-size",
}  # fmt: skip
# Bytes read of an operand that the op only selects from: its output's.
SELECTING = {"slice", "dynamic-slice", "gather"}
# Ops that update their operand 0 in place: only the update (operand 1, scatter's 2) moves.
IN_PLACE = {"dynamic-update-slice": 1, "scatter": 2}
# Ops a fused operand passes through unchanged in size on its way to a selecting op.
VIEWS = {"bitcast", "reshape", "copy", "transpose"}
RANDOM_MARKERS = ("threefry", "random_bits", "rng_bit_generator", "rng_uniform", "philox")
# The fused attention kernel's FLOPs per B·H·Lq·Lk·D, by Triton kernel name: the forward's two
# matmuls; dQ recomputes the scores and probabilities (QKᵀ, dO·Vᵀ, dS·K: three); dK/dV four
# (QKᵀ, Pᵀ·dO, dO·Vᵀ, dSᵀ·Q); two FLOPs a multiply-add.
ATTENTION_KERNEL_UNITS = {"_forward_kernel": 4, "_dq_kernel": 6, "_dkv_kernel": 8}


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    type: str  # the result type as printed: "bf16[32,512]{1,0}" or a tuple "(…, …)"
    opcode: str
    operands: tuple[str, ...]
    attributes: str  # everything after the operand list

    def attribute(self, key: str) -> str | None:
        """The computation named by ``key=%name`` (calls, body, condition, to_apply)."""
        match = re.search(rf"\b{key}=%?([\w.\-]+)", self.attributes)
        return match[1] if match else None

    def op_name(self) -> str:
        """The JAX source path XLA kept for this instruction ("" if none)."""
        match = re.search(r'op_name="([^"]*)"', self.attributes)
        return match[1] if match else ""


@dataclasses.dataclass(frozen=True)
class Computation:
    name: str
    instructions: tuple[Instruction, ...]
    root_name: str

    def by_name(self) -> dict[str, Instruction]:
        return {i.name: i for i in self.instructions}

    @property
    def root(self) -> Instruction:
        return self.by_name()[self.root_name]


def arrays(type_text: str) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, dims) of every array in a printed type, tuple elements in order."""
    return [
        (dtype, tuple(int(d) for d in dims.split(",") if d))
        for dtype, dims in _ARRAY.findall(type_text)
        if dtype in DTYPE_BYTES
    ]


def type_bytes(type_text: str) -> float:
    return sum(math.prod(dims) * DTYPE_BYTES[dtype] for dtype, dims in arrays(type_text))


def type_elements(type_text: str) -> int:
    return sum(math.prod(dims) for _, dims in arrays(type_text))


def _closing(text: str, start: int) -> int:
    """Index of the parenthesis closing the one at ``start``."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index
    raise ValueError(f"unbalanced parentheses in HLO line: {text[:200]}")


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and braces."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def parse_instruction(line: str) -> Instruction | None:
    line = _COMMENT.sub("", line.strip())
    if line.startswith("ROOT "):
        line = line[5:]
    name, sep, rest = line.partition(" = ")
    if not sep:
        return None
    if rest.startswith("("):
        end = _closing(rest, 0)
        type_text, rest = rest[: end + 1], rest[end + 1 :].lstrip()
    else:
        type_text, _, rest = rest.partition(" ")
    opcode, paren, rest = rest.partition("(")
    if not paren:
        return None
    end = _closing("(" + rest, 0) - 1
    operands = tuple(
        part.split()[-1].lstrip("%") for part in _split_top(rest[:end]) if part.split()
    )
    return Instruction(name.lstrip("%"), type_text, opcode, operands, rest[end + 1 :])


def parse_module(text: str) -> tuple[dict[str, Computation], str]:
    """Every computation of an HLO module's text by name, and the entry's name."""
    computations, entry, current, body, root = {}, None, None, [], ""
    for line in text.splitlines():
        if current is None:
            header = _HEADER.match(line.strip())
            if header:
                current, body = header[2], []
                if header[1]:
                    entry = current
            continue
        if line.strip() == "}":
            computations[current] = Computation(current, tuple(body), root or body[-1].name)
            current, root = None, ""
            continue
        instruction = parse_instruction(line)
        if instruction is not None:
            body.append(instruction)
            if line.lstrip().startswith("ROOT "):
                root = instruction.name
    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    return computations, entry


def trip_count(instruction: Instruction) -> int | None:
    match = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', instruction.attributes)
    return int(match[1]) if match else None


@dataclasses.dataclass
class Counts:
    """One compiled program's census (see the module docstring); every figure per execution."""

    matmul_flops: float = 0.0
    attention_flops: float = 0.0
    traffic_bytes: float = 0.0
    launches: int = 0
    random_launches: int = 0
    random_elements: int = 0
    converts_f32_to_bf16: int = 0  # elements
    converts_bf16_to_f32: int = 0  # elements
    loops_without_trip_count: int = 0

    @property
    def flops(self) -> float:
        return self.matmul_flops + self.attention_flops

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "flops": self.flops}


def dot_flops(instruction: Instruction, lhs_type: str) -> float:
    """2 · output elements · contracted size of a ``dot``."""
    (_, lhs_dims), *_ = arrays(lhs_type)
    match = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", instruction.attributes)
    contracted = [int(d) for d in match[1].split(",") if d] if match else []
    return 2.0 * type_elements(instruction.type) * math.prod(lhs_dims[d] for d in contracted)


def _backend_config(instruction: Instruction) -> dict:
    match = re.search(r"backend_config=(\{.*\})\s*$", instruction.attributes)
    if not match:
        match = re.search(r"backend_config=(\{.*?\})(?:, \w+=|$)", instruction.attributes)
    try:
        return json.loads(match[1]) if match else {}
    except json.JSONDecodeError:
        return {}


def _find_key(tree, key: str):
    """The first value of ``key`` anywhere in a nested JSON tree."""
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        tree = list(tree.values())
    if isinstance(tree, list):
        for value in tree:
            found = _find_key(value, key)
            if found is not None:
                return found
    return None


def custom_call_flops(instruction: Instruction, operand_types: list[str]) -> tuple[float, float]:
    """(matmul, attention) FLOPs of a custom call: cuBLAS GEMMs by their dimension numbers,
    cuDNN attention and the fused attention kernel by formula; other targets none."""
    target = re.search(r'custom_call_target="([^"]+)"', instruction.attributes)
    target = target[1] if target else ""
    config = _backend_config(instruction)
    if "gemm" in target or "matmul" in target:
        numbers = _find_key(config, "dot_dimension_numbers") or {}
        contracted = [int(d) for d in numbers.get("lhs_contracting_dimensions", [])]
        (_, lhs_dims), *_ = arrays(operand_types[0])
        out = arrays(instruction.type)[0][1]
        return 2.0 * math.prod(out) * math.prod(lhs_dims[d] for d in contracted), 0.0
    if "fmha" in target:
        # The scores' shape [B, H, Lq, Lk] is in the config; D is q's last (minor) extent.
        scores = (_find_key(config, "intermediate_tensor_shape") or {}).get("dimensions", [])
        head_dim = arrays(operand_types[0])[0][1][-1]
        unit = math.prod(int(d) for d in scores) * head_dim
        return 0.0, (10.0 if "Backward" in target else 4.0) * unit
    kernel = next((k for k in ATTENTION_KERNEL_UNITS if k in instruction.attributes), None)
    if kernel is not None and len(operand_types) >= 2:
        # q and k as the kernel takes them: [B, H, L, D] (or any order with D last and the
        # same batch and head extents), so B·H·Lq·Lk·D = |q| · Lk.
        (_, q), (_, k) = arrays(operand_types[0])[0], arrays(operand_types[1])[0]
        return 0.0, ATTENTION_KERNEL_UNITS[kernel] * math.prod(q) * k[-2]
    return 0.0, 0.0


def _is_random(computation: Computation, computations: dict[str, Computation]) -> bool:
    for instruction in computation.instructions:
        if instruction.opcode in ("rng-bit-generator", "rng") or any(
            marker in instruction.attributes for marker in RANDOM_MARKERS
        ):
            return True
        called = instruction.attribute("calls")
        if called in computations and _is_random(computations[called], computations):
            return True
    return False


def _operand_read_bytes(computation: Computation, parameter: Instruction) -> float:
    """Bytes a fusion reads of the operand its ``parameter`` stands for: what selecting ops
    take of it, nothing where it is the buffer an in-place update writes into."""
    users: dict[str, list[Instruction]] = {}
    for instruction in computation.instructions:
        for operand in instruction.operands:
            users.setdefault(operand, []).append(instruction)
    full = type_bytes(parameter.type)

    def read(name: str) -> float | None:
        """Bytes read through ``name``, None when it is read whole."""
        total = 0.0
        for user in users.get(name, []):
            if user.opcode in SELECTING and user.operands[0] == name:
                total += type_bytes(user.type)
            elif user.opcode in IN_PLACE and user.operands[0] == name:
                continue
            elif user.opcode in VIEWS:
                through = read(user.name)
                if through is None:
                    return None
                total += through
            else:
                return None
        return total

    selected = read(parameter.name)
    return full if selected is None else min(selected, full)


def _output_bytes(instruction: Instruction, computation: Computation | None) -> float:
    """Bytes a launch writes: an in-place update's update only; a scratch buffer not at all."""
    if instruction.opcode == "custom-call":
        parts = arrays(instruction.type)
        if len(parts) > 1 and parts[-1][0] in ("s8", "u8"):
            parts = parts[:-1]
        return sum(math.prod(dims) * DTYPE_BYTES[dtype] for dtype, dims in parts)
    if computation is None:
        return type_bytes(instruction.type)
    table = computation.by_name()
    root = computation.root
    outputs = [table[o] for o in root.operands] if root.opcode == "tuple" else [root]
    total = 0.0
    for output in outputs:
        while output.opcode in VIEWS - {"copy", "transpose"} and output.operands[0] in table:
            output = table[output.operands[0]]
        if output.opcode in IN_PLACE:
            total += type_bytes(table[output.operands[IN_PLACE[output.opcode]]].type)
        else:
            total += type_bytes(output.type)
    return total


class _Census:
    def __init__(self, computations: dict[str, Computation], scope: str | None):
        self.computations = computations
        self.scope = scope
        self.counts = Counts()

    def run(self, name: str, times: float) -> None:
        computation = self.computations[name]
        table = computation.by_name()
        for instruction in computation.instructions:
            self.executed(instruction, table, times)

    def executed(self, instruction: Instruction, table: dict[str, Instruction], times: float):
        opcode = instruction.opcode
        if opcode == "while":
            trips = trip_count(instruction)
            if trips is None:
                self.counts.loops_without_trip_count += 1
                trips = 1
            self.run(instruction.attribute("body"), times * trips)
            self.run(instruction.attribute("condition"), times * (trips + 1))
            return
        if opcode == "call":
            self.run(instruction.attribute("to_apply"), times)
            return
        if opcode == "conditional":
            for branch in re.findall(r"%?([\w.\-]+)", _branches(instruction)):
                self.run(branch, times)
            return
        if self.scope is not None and self.scope not in instruction.op_name():
            return
        self.fused_work(instruction, table, times)
        if opcode in NOT_LAUNCHED or opcode.endswith("-done"):
            return
        self.counts.launches += round(times)
        operand_types = [table[o].type if o in table else "" for o in instruction.operands]
        fused = self.computations.get(instruction.attribute("calls") or "")
        if opcode == "fusion" and fused is not None:
            parameters = sorted(
                (i for i in fused.instructions if i.opcode == "parameter"),
                key=lambda i: int(re.match(r"\s*(\d+)", i.operands[0] or "0")[1]),
            )
            reads = sum(_operand_read_bytes(fused, p) for p in parameters)
            if _is_random(fused, self.computations):
                self.counts.random_launches += round(times)
                self.counts.random_elements += round(times * type_elements(instruction.type))
        elif opcode in SELECTING:
            reads = type_bytes(instruction.type) + sum(type_bytes(t) for t in operand_types[1:])
        elif opcode in IN_PLACE:
            reads = sum(type_bytes(t) for t in operand_types[1:])
        else:
            reads = sum(type_bytes(t) for t in operand_types)
        if opcode in IN_PLACE:
            writes = type_bytes(operand_types[IN_PLACE[opcode]])
        else:
            writes = _output_bytes(instruction, fused if opcode == "fusion" else None)
        self.counts.traffic_bytes += times * (reads + writes)
        if opcode == "custom-call":
            matmul, attention = custom_call_flops(instruction, operand_types)
            self.counts.matmul_flops += times * matmul
            self.counts.attention_flops += times * attention
        if opcode == "rng-bit-generator":
            self.counts.random_launches += round(times)
            self.counts.random_elements += round(times * type_elements(instruction.type))

    def fused_work(self, instruction: Instruction, table: dict[str, Instruction], times: float):
        """Dots and converts of ``instruction`` and, for a fusion, of its fused computation."""
        opcode = instruction.opcode
        if opcode == "dot":
            self.counts.matmul_flops += times * dot_flops(
                instruction, table[instruction.operands[0]].type
            )
        elif opcode == "convert" and instruction.operands[0] in table:
            source = arrays(table[instruction.operands[0]].type)
            target = arrays(instruction.type)
            if source and target:
                pair, elements = (source[0][0], target[0][0]), type_elements(instruction.type)
                if pair == ("f32", "bf16"):
                    self.counts.converts_f32_to_bf16 += round(times * elements)
                elif pair == ("bf16", "f32"):
                    self.counts.converts_bf16_to_f32 += round(times * elements)
        if opcode in ("fusion",) or (opcode.endswith("-start") and instruction.attribute("calls")):
            called = self.computations.get(instruction.attribute("calls") or "")
            if called is not None:
                inner = called.by_name()
                for fused in called.instructions:
                    self.fused_work(fused, inner, times)


def _branches(instruction: Instruction) -> str:
    match = re.search(r"branch_computations=\{([^}]*)\}", instruction.attributes)
    if match:
        return match[1]
    return " ".join(
        filter(
            None,
            (instruction.attribute("true_computation"), instruction.attribute("false_computation")),
        )
    )


def count(hlo_text: str, scope: str | None = None) -> Counts:
    """The census of one optimized HLO module (``compiled.as_text()``); with ``scope``, of the
    work whose source op name (``metadata={op_name=…}``) contains it (a named scope, a Flax
    method: ``mlm_nll`` is the MLM head)."""
    computations, entry = parse_module(hlo_text)
    census = _Census(computations, scope)
    census.run(entry, 1)
    return census.counts
