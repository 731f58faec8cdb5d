"""Code generation: IntegrationPlan -> libcst edits (cache-dit checkout or standalone module).

Importing this package does no work (it imports libcst, not torch, diffusers or pygls).
"""

from .edits import Conflict, ConflictError, FileChange
from .generate import GenerationResult, generate, write
from .manifest import default_manifest_path
from .plan import SCHEMA_VERSION, FieldError, IntegrationPlan, parse_plan
from .plan_builder import PlanBuildError, build_plan
from .workspace_edit import workspace_edit

__all__ = [
    "SCHEMA_VERSION",
    "Conflict",
    "ConflictError",
    "FieldError",
    "FileChange",
    "GenerationResult",
    "IntegrationPlan",
    "PlanBuildError",
    "build_plan",
    "default_manifest_path",
    "generate",
    "parse_plan",
    "workspace_edit",
    "write",
]
