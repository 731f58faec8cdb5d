"""New-models end-to-end suite: tiny random-weight pipelines of diffusers classes cache-dit has no
adapter for, run through analyze -> plan -> generate (standalone) -> verify with zero edits.

``python -m tests.new_models.suite [names...]`` prints the measured table (docs/new-models.md).
"""
