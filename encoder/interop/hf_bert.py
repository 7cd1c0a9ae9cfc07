"""`python -m encoder.interop.hf_bert`: now `encoder import_hf` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("import_hf")  # noqa: E701,E702
