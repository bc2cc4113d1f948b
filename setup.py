"""The compiled part of kdb (everything else is in pyproject.toml): kdb/_speedups.c, the stage normaliser in C
(kdb.triton.normalize uses it when it imports). optional=True: without a C compiler the install still
succeeds and kdb runs its pure-Python reference."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kdb._speedups", ["kdb/_speedups.c"], optional=True)])
