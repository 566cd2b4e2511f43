"""Benchmarks against the LangChain implementations loopline reproduces."""
