"""Not code: this folder is installed as the package ``flowmaker_configs`` (setup.py) so that an
installed wheel finds its configs with ``importlib.resources`` (``profiler.catalog.configs_dir``)."""
