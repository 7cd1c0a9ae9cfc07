"""`python -m encoder.interop.export`: the `export` command (encoder/commands/export.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("export")  # noqa: E701,E702
