"""`python -m encoder.data.stdlib_tasks`: the `tasks` command (encoder/commands/tasks.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("tasks")  # noqa: E701,E702
