"""The one place that talks to orbax.

A checkpoint holds the seed-stacked train state (``StandardSave``) and a JSON
metadata item (step, config fingerprint). Saves are asynchronous; call
:meth:`Checkpointer.close` (or use it as a context manager) so the last save is
awaited before the process exits.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import orbax.checkpoint as ocp

__all__ = ["Checkpointer"]


class Checkpointer:
  """Keep-last-N checkpoints of a train state under ``directory``."""

  def __init__(self, directory: str, *, max_to_keep: int = 2):
    self.directory = os.path.abspath(directory)
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def save(self, step: int, state: Any, meta: dict) -> None:
    """Starts an asynchronous save of ``state`` and ``meta`` at ``step``."""
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    """Restores ``(state, meta)``; ``abstract_state`` gives shapes/shardings."""
    out = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        meta=ocp.args.JsonRestore()))
    return out["state"], out["meta"]

  def restore_meta(self, step: int) -> dict:
    out = self._manager.restore(step, args=ocp.args.Composite(
        meta=ocp.args.JsonRestore()))
    return out["meta"]

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
