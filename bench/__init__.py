"""Benchmarks of squad_memory side by side with agent-squad and LangChain.

Run ``python -m bench`` (``--quick`` for a smoke run, ``--only W1,W3`` for some
workloads). Results go to ``bench/results/``.
"""
