"""zbsolve: pipeline-parallel training schedules, optimized with CP-SAT and checked by simulation.

The data path: ``instance`` -> ``dag`` -> ``baselines`` | ``solver`` -> ``schedule`` ->
``simulate`` -> ``export`` -> ``runtime``. Importing this package imports none of the layers,
so the solver stays free of torch.
"""

__version__ = "0.1.0"


def profile_layers(layers, example_input, loss_fn, **kwargs):
    """Per-layer F, I, W, memory of any torch model -> ``zbsolve.layers.LayerProfile``.

    See :func:`zbsolve.profiler.layers.profile_layers` (imported here lazily: it needs torch).
    """
    from zbsolve.profiler.layers import profile_layers as _profile_layers

    return _profile_layers(layers, example_input, loss_fn, **kwargs)
