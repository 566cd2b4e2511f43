"""The todos consumer: owner of ``write_todos`` (validate, store, publish)."""
