"""Setting known leaks aside: suppressions (LeakSanitizer's format) and baselines."""

from __future__ import annotations

import os
from collections.abc import Mapping

# The suppression files every scan adds to its own (suppressions.ENV): named
# here, where a scan with none finds it without the suppressions module.
SUPPRESSIONS_ENV = "UNREACHABLE_SUPPRESSIONS"


def suppression_paths_from_env(environ: Mapping[str, str] = os.environ) -> list[str]:
    """UNREACHABLE_SUPPRESSIONS: files separated by ':' (like PATH)."""
    return [p for p in environ.get(SUPPRESSIONS_ENV, "").split(":") if p]
