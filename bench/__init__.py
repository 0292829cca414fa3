"""squad_memory's benchmarks (``python -m bench``); not part of the installed package."""
