"""The simulator on PyPy (`testbed sim --pypy`): the image with the
interpreter (image.py), the host's side that runs a simulation in it
(run.py) and the side that runs there (worker.py)."""
