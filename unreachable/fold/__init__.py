"""Fold and deduplicate leaks (the native part folds; this merges by backtrace)."""
