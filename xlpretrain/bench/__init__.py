"""Measurements: training-step throughput and MFU, the census of the compiled step beside a
plain reference, the PyTorch peer, the attention micro-benchmark, the input pipeline from a
prepared store, and the GPU suite. `python -m xlpretrain.bench` runs them.
"""
