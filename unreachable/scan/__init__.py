"""One scan of a live process: facts, a plan, then the pipeline's stages
(docs/scan-stages.md)."""

from unreachable.scan.options import CONTENTS_BYTES, Progress, ScanOptions, SweepMode
from unreachable.scan.run import scan, scan_core

__all__ = ["CONTENTS_BYTES", "Progress", "ScanOptions", "SweepMode", "scan", "scan_core"]
