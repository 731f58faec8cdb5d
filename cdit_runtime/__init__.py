"""Verification runs of cache-dit integrations: baseline vs cache, CP, TP, TE-P, VAE-P, hybrid.

``python -m cdit_runtime verify REQUEST.json`` (or ``cdit-integrate verify``). The documents it
reads and writes are `cdit_runtime.contract`'s (stdlib only). Modules: ``controller`` (no torch:
plans launches with ``planning``, starts ranks with ``launcher``, scores with ``metrics``, writes
``results.json``); ``worker`` (one rank: ``loading``, ``integration``, ``phases``);
``tiny_pipelines`` and ``shrink`` (random-weight models); ``side_by_side`` (benchmark).

torch, diffusers and cache-dit are imported lazily by the run code, never at package import.
"""
