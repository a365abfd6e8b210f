"""Experiment files: loading and validating the YAML (spec.py), and the resolved,
fully concrete form every backend runs (model.py)."""
