"""Experiment files: the public face is spec.py (load, check, resolve, dump,
schema); the file format is one pydantic model (document.py, parts.py,
activity.py, values.py); model.py is the resolved, fully concrete form every
backend runs."""
