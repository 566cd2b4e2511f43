"""The tools consumer: runs the agent's tool calls, each on its own, concurrently."""
