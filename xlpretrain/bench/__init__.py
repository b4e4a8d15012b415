"""Measurements: training-step throughput and MFU, the PyTorch peer, the attention micro-benchmark,
the input pipeline from a prepared store, and the GPU suite. `python -m xlpretrain.bench` runs them.
"""
