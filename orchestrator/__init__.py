"""Experiment files, graphs and link models, the virtual-time simulator, the run
controller and the backends that start real routers (local processes, Docker)."""
