"""`has_separate_cfg` inferred statically from a pipeline's source: see `separate_cfg`."""

from .separate_cfg import infer_separate_cfg

__all__ = ["infer_separate_cfg"]
