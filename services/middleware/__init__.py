"""The middleware the services run, with LangChain v1's names, parameters and defaults:
loopline's own (``todo``, ``context_editing``, ``ratelimit``) and LangChain's built-ins made
to travel in a spec (``builtins``). ``loopline.middleware`` is their public face; they live
here, below the services, because the services run them."""
