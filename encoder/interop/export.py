"""`python -m encoder.interop.export`: now `encoder export` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("export")  # noqa: E701,E702
