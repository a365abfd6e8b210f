"""What a testbed and its runs leave on disk: the record of running testbeds (state), where a run
directory goes, and the run directory's generic files (manifest.json, run info, router CPU)."""
