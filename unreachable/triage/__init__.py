"""Setting known leaks aside: suppressions (LeakSanitizer's format) and baselines."""

# The suppression files every scan adds to its own (suppressions.ENV): named
# here, where a scan with none finds it without the suppressions module.
SUPPRESSIONS_ENV = "UNREACHABLE_SUPPRESSIONS"
