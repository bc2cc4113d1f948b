"""kdb: an offline artifact database and diff tool for Triton kernel caches."""

# The package version (pyproject.toml reads it from here): a constant, since importlib.metadata cost
# 25-45 ms of every command's start-up.
__version__ = "0.1.0"
