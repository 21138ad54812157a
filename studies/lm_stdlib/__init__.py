"""The language study (study.md): a byte-level LM on Python's standard library, 10 PEs."""
