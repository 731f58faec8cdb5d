"""cdit-integrator's Python side: static analysis, code generation and the language server."""
