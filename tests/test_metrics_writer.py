"""TensorBoard beside metrics.jsonl: every logged scalar reaches the event file, written without
importing torch (tensorboardX imports it when installed, about 2 s of every run's start-up)."""

import json
import pathlib
import struct
import subprocess
import sys

# A fresh interpreter: this test process has imported torch already (transformers' parity tests).
WRITE_TWO_STEPS = """
import sys
from xlpretrain.training.metrics import MetricsWriter
writer = MetricsWriter(sys.argv[1])
writer.write(1, {"loss": 2.5, "accuracy/mmlm": 0.25})
writer.write(2, {"loss": 2.0, "accuracy/mmlm": 0.5})
writer.close()
print("torch imported" if "torch" in sys.modules else "no torch")
"""


def scalars(tb: pathlib.Path) -> list[tuple[int, str, float]]:
    """(step, tag, value) of every scalar in the TFRecord event files under `tb`."""
    from tensorboardX.proto import event_pb2

    found = []
    for path in sorted(tb.glob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4  # length, its CRC, the record, its CRC
            found += [(event.step, v.tag, v.simple_value) for v in event.summary.value]
    return found


def test_scalars_reach_tensorboard_without_importing_torch(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", WRITE_TWO_STEPS, str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert result.stdout.strip() == "no torch"
    assert scalars(tmp_path / "tb") == [
        (1, "loss", 2.5), (1, "accuracy/mmlm", 0.25), (2, "loss", 2.0), (2, "accuracy/mmlm", 0.5)
    ]  # fmt: skip
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
