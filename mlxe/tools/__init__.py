"""The laboratory beside the library: benchmarks (``bench/``, with the Stable-Baselines3 runner) and
the hyper-parameter tuner (``tune.py``). Each registers its own ``mlxe`` subcommand; nothing in the
library imports them."""
