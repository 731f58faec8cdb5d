"""Verification runs of cache-dit integrations: baseline vs cache, CP, TP, TE-P, VAE-P, hybrid.

torch, diffusers and cache-dit are imported lazily by the run code, never at package import.
"""
