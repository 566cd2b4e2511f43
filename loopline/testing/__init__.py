"""Test support, shipped and named as such (like ``faststream.redis.testing``): what
loopline's own tests, its benchmarks and ``loopline demo`` use, and what a team testing
its agents on loopline can use too.

- ``scripted``: an OpenAI-compatible chat-completions server replaying scripted replies
  (``python -m loopline.testing.scripted`` runs it on its own);
- ``processes``: every service as its own OS process, and the scripted server as one;
- ``redis_provider``: where a test session's Redis comes from;
- ``harness``: unique prefixes, twin scripted servers, services on a scripted model;
- ``held_tool``: a tool call held until the caller releases it.

Every process started here dies with the process that started it, however that one dies
(``loopline.lifetime``).

Nothing is imported here: ``python -m loopline.testing.scripted`` must find its module
not yet imported, and a test imports only what it uses.
"""
