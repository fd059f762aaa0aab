"""How a report's values read, shared by every human-facing format (table, Markdown, HTML).

Why a module of its own: :mod:`.render` (text formats) and :mod:`.html` both need these, and ``render``
dispatches to ``html``; with them in ``render`` the two modules imported each other.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

#: Columns kept for CSV/JSON/plots but left out of the text tables (they would double their width).
HIDDEN = {"overhead": ("mean", "mean_ci_low", "mean_ci_high")}
EMPTY = {
    "scaling": "no config ran with more than one worker count next to a 1-worker (or single) cell",
    "ps": "no config ran with more than one parameter-server count",
    "sync_async": "no config ran in both sync and ps-async mode",
    "system": "no run recorded system samples",
    "step_times": "no run recorded per-step times",
    "metadata": "no metadata differs",
    "drift": "no layer has enough repeats to test for drift",
}


def format_value(column: str, value: Any) -> str:
    """The one display format of a cell (table and Markdown)."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if column.endswith("_pct"):
            text = f"{v:.1f}"
        elif abs(v) >= 100:
            text = f"{v:.1f}"
        elif abs(v) >= 1:
            text = f"{v:.3f}"
        else:
            text = f"{v:.4g}"
        return "0.0" if text in ("-0.0", "-0") else text
    return str(value)


def shown_columns(name: str, frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in HIDDEN.get(name, ())]
