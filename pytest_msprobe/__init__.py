"""pytest-msprobe: an msprobe dump as a pytest suite, each API against a float64 CPU benchmark."""

__version__ = "0.1.0"
