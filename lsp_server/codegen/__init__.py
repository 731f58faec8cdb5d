"""Code generation: IntegrationPlan -> libcst edits (cache-dit checkout or standalone module).

Importing this package does no work (it imports libcst, not torch, diffusers or pygls).
"""

from .edits import Conflict, ConflictError, FileChange, WriteError
from .generate import GenerationResult, Workspace, generate, write
from .manifest import default_manifest_path
from .plan import SCHEMA_VERSION, FieldError, IntegrationPlan, parse_plan
from .plan_answers import answer_errors, answer_file_errors, resolve_relative
from .plan_builder import PlanBuildError, build_plan, registry_name_errors

__all__ = [
    "SCHEMA_VERSION",
    "Conflict",
    "ConflictError",
    "FieldError",
    "FileChange",
    "GenerationResult",
    "IntegrationPlan",
    "PlanBuildError",
    "Workspace",
    "WriteError",
    "answer_errors",
    "answer_file_errors",
    "build_plan",
    "default_manifest_path",
    "generate",
    "parse_plan",
    "registry_name_errors",
    "resolve_relative",
    "write",
]
