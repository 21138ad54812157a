"""The library's run errors: one line each, with what the caller can do.

The library speaks in its own arguments (``resume=False``, another workdir);
a command-line program maps :attr:`RunError.remedy` to its flags
(``experiments.cli.error_line``), so no flag name lives in the library.
"""
from __future__ import annotations

import enum
from typing import Optional

__all__ = ["Remedy", "RunError"]


class Remedy(enum.Enum):
  """What the caller can do about a :class:`RunError` (the value: the
  library's own wording)."""
  START_OVER = "start the run over (resume=False)"
  OTHER_WORKDIR = "choose another workdir"
  START_OVER_OR_OTHER_WORKDIR = "start the run over (resume=False) or choose another workdir"
  LOWER_LEARNING_RATE = "a lower learning rate may help"
  FREE_SPACE = "free some space (or choose another workdir), then resume the run"


class RunError(RuntimeError):
  """A run that cannot go on: ``reason`` (one line) and an optional ``remedy``."""

  def __init__(self, reason: str, remedy: Optional[Remedy] = None):
    super().__init__(reason if remedy is None else f"{reason}; {remedy.value}")
    self.reason = reason
    self.remedy = remedy
