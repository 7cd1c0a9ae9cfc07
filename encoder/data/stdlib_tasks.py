"""`python -m encoder.data.stdlib_tasks`: now `encoder tasks` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("tasks")  # noqa: E701,E702
