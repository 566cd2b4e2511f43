"""The loop: owner of each task's state machine (start, join, advance, finish, limits)."""
