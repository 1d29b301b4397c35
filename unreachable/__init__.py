"""unreachable: find native memory leaks in running processes by proving memory unreachable."""

__version__ = "0.1.0"
