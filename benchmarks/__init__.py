"""Benchmarks against the anchors, each side by side with its baseline in the same run.

``python -m benchmarks`` runs them all and writes ``benchmarks/results/README.md`` (and a
chart when matplotlib is installed); ``python -m benchmarks.context_editing``,
``python -m benchmarks.recovery`` and ``python -m benchmarks.ab REV`` run one each.
"""

import os

# A benchmark is operator and producer of the services it measures: its own tool modules
# may be imported, its tasks carry their specs, and the in-consumer scripted model runs
# (inherited by every service process it starts).
os.environ.setdefault("LOOPLINE_ALLOWED_MODULES", "benchmarks")
os.environ.setdefault("LOOPLINE_ALLOW_INLINE_AGENTS", "true")
os.environ.setdefault("LOOPLINE_ALLOW_FAKE_MODEL", "true")
