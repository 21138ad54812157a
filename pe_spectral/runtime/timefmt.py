"""Time formatting for progress lines (the library's and the programs')."""

__all__ = ["minutes_seconds"]


def minutes_seconds(seconds: float) -> str:
  """``95.4`` -> ``"1m35s"``: elapsed times and ETAs in progress lines."""
  return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
