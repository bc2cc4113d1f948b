"""kdb: an offline artifact database and diff tool for Triton kernel caches."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kdb")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"
