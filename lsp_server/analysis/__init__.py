"""Static analysis of DiT transformer sources: pure functions, no pygls/torch/diffusers import."""

from .analyze import AnalysisResult, analyze_path
from .model import AnalysisError

__all__ = ["AnalysisError", "AnalysisResult", "analyze_path"]
