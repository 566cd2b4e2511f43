"""The spec layer: from an ``AgentSpec`` to the objects it names, for ``loopline`` (which
turns a user's objects into a spec) and the services (which rebuild them) alike.

- ``middleware``: a ``MiddlewareSpec`` to and from its middleware instance;
- ``validation``: a spec checked before any task runs (``signature``: parameters against
  constructors, types included; ``jsonable``: what must travel or be stored as JSON);
- ``toolbox``: tool references to LangChain tools and their schemas;
- ``models``: in-process chat models (embedded mode);
- ``local``: the one registry of in-process objects named by ``local:`` references;
- ``imports``: the one resolver of ``package.module:name`` references.
"""
