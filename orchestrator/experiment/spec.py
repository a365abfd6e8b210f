"""Experiment files, the public face: load and check a file (`load_experiment`,
`parse_experiment`), resolve it (`Experiment.resolve(seed)`), write the
resolved form back (`resolved_to_yaml`) and describe the format
(`experiment_json_schema`, what `testbed schema` prints).

The format has one description, the pydantic model in document.py (with
parts.py, activity.py and the value types of values.py); yamlsrc.py reads the
YAML safely with line numbers, check.py applies the rules that need the whole
file, resolve.py makes the random choices and dump.py writes the result.
Every problem is ONE `InputError` per line reading `file:line: field.path: what
was expected`; unknown keys are errors, so a typo never silently falls back to a
default. docs/experiment-files.md documents the format for people.
"""

from __future__ import annotations

from orchestrator.experiment.check import load_experiment, parse_experiment
from orchestrator.experiment.document import experiment_json_schema
from orchestrator.experiment.dump import resolved_to_yaml
from orchestrator.experiment.experiment import Experiment

__all__ = ["Experiment", "load_experiment", "parse_experiment", "resolved_to_yaml", "experiment_json_schema"]
