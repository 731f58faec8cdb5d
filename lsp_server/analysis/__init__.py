"""Static analysis of DiT transformer sources: pure functions, no pygls/torch/diffusers import."""

from .analyze import AnalysisResult, analyze_path
from .model import AnalysisError
from .pipeline.call_arguments import PipelineCall

__all__ = ["AnalysisError", "AnalysisResult", "PipelineCall", "analyze_path"]
