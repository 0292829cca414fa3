"""The demo's settings, with the claim's lease from ``SM_CLAIM_LEASE`` (seconds): the
tasks-mode worker tests kill a worker and wait for its claim to run out."""

from __future__ import annotations

import os

from project.settings import *  # noqa: F403
from project.settings import SQUAD_MEMORY

SQUAD_MEMORY = {**SQUAD_MEMORY, "CLAIM_LEASE": float(os.environ.get("SM_CLAIM_LEASE", "30"))}
