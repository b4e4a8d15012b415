"""The shipped configs, installed with the package as `xlpretrain.configs`: each a file whose
`get_config(ARG)` returns a run's `ml_collections.ConfigDict`. A program's `--config` takes a
path (`configs/xlmr.py:tiny` in a clone) or a shipped config's name (`xlmr:tiny`)."""
