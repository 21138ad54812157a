"""The machine a run is on: device placement (``devices``), memory budgets (``memory``),
XLA's CPU flags (``xla_config``), the garbage collector's thresholds (``gc_tuning``),
the speed layer's switch (``speed``), the run errors
(``errors``) and time formatting (``timefmt``). Imports no other room.
"""
