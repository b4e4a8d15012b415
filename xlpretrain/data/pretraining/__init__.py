"""Pre-training's input: corpus lines packed into rows of the Batch contract by each
objective's row kind, masked, drawn by language and step (sampling, anneal), and served step by
step by the grain pipeline; plus the synthetic rows the benchmark times."""
