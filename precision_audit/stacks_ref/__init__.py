"""Referees for the stack presets: the real third-party kernels, run on (1, 0) pairs, and numpy
models of exactly what they compute.  Used by the tests only; nothing here is public API.
"""
