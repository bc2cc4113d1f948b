# kdb/_speedups.c (built by setup.py where a C compiler is found; optional)

def normalise_stage(text: str, kind: str) -> str | None:
    """kdb.triton.normalize.normalise_stage_pure(text, kind) in C, or None for text it leaves to Python."""
