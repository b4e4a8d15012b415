"""Devices: the mesh and the logical-axis rules that place parameters and activations on it,
multi-process start-up, and the GPU targets kernels compile for.
"""
