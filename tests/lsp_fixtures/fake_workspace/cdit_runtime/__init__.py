"""A stand-in for the verification runtime, used by the server's run tests.

`python -m cdit_runtime verify REQUEST.json` run from this folder finds this package first. It
prints ProgressEvents of the real contract and writes `results.json`; with
`extraCallKwargs.fake == "hang"` it starts a child, a grandchild in a session of its own (only a
walk of the process tree finds it) and waits to be cancelled.
"""
