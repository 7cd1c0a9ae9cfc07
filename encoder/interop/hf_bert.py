"""`python -m encoder.interop.hf_bert`: the `import_hf` command (encoder/commands/import_hf.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("import_hf")  # noqa: E701,E702
