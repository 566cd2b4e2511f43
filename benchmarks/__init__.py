"""Benchmarks against the anchors, each side by side with its baseline in the same run.

``python -m benchmarks`` runs them all and writes ``benchmarks/results/README.md`` (and a
chart when matplotlib is installed); ``python -m benchmarks.context_editing``,
``python -m benchmarks.recovery`` and ``python -m benchmarks.ab REV`` run one each.
"""
