"""The task state machine, below every service: a task's state and phases (``state``),
its transitions (``transitions``, each with its Lua in ``lua/``, run by ``transition``),
and the agent loop that applies them, one method per event (``loop.Loop``). The loop
service consumes its streams with it; the model and tools services apply a hook-free
agent's transitions with it directly (``handover``). ``transitions`` draws the phases.
"""
