"""The console script itself: --help and --version work after set-up."""

import subprocess
import sys
from pathlib import Path

TESTBED = Path(sys.executable).with_name("testbed")


def test_version_prints_the_package_version():
    out = subprocess.run([TESTBED, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("testbed 0.")


def test_help_lists_usage():
    out = subprocess.run([TESTBED, "--help"], capture_output=True, text=True, check=True)
    assert "Usage" in out.stdout
