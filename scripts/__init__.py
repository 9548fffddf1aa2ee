"""Developer tools: the local engine, dev server, token, demo and benchmarks (never shipped)."""
