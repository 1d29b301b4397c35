"""Setting known leaks aside: suppressions (LeakSanitizer's format) and baselines."""
