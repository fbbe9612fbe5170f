"""The torch.distributed runner: execute an executor table on a real model, prove, measure.

This package (and the profiler) are the only places that import torch; nothing on the core,
solver or export path imports from here.
"""
