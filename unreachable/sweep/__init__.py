"""Mark from the roots, sweep what is left (native/scanner/heap_walker.c)."""
