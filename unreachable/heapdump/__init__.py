"""Heap dumps: live ones (live.py), and malloc_debug's text format (dump_format.py, viewer.py)."""
