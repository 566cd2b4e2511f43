"""The model consumer: one chat-model call per ModelRequested."""
