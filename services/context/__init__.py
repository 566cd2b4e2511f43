"""Context editing: the model's view of a transcript, trimmed the way LangChain trims it."""
