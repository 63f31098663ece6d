"""Loaded by every Python the tests start (conftest.py puts this folder on PYTHONPATH): the
interpreter's last garbage collection, at exit, walks every object `import torch` made: about a second
of a CPU per process (README, Tests), in a suite that starts over a hundred of them. Frozen objects are left out of that
walk. Registered first, the freeze runs after every other atexit handler (they run last-in first-out),
so the program's own exit code, flushes and thread joins all happen as without it."""
import atexit
import gc

atexit.register(gc.freeze)
