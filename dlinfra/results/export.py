"""Runs as a pandas DataFrame, and its CSV/Parquet export."""

from __future__ import annotations

from typing import IO, Any

import pandas as pd

from dlinfra.errors import DlinfraError
from dlinfra.results.store import ResultsStore

EXPORT_FORMATS = ("csv", "parquet")


def runs_frame(store: ResultsStore, campaign_id: str | None = None, with_records: bool = False) -> pd.DataFrame:
    """One row per process per run; the full record (``record``, decoded) only when asked."""
    frame = pd.DataFrame(store.runs(campaign_id))
    if frame.empty:
        return frame
    frame["emulated"] = frame["emulated"].astype(bool)
    return frame.drop(columns=["record_json"] if with_records else ["record_json", "record"])


def export_runs(store: ResultsStore, campaign_id: str | None, fmt: str, out: IO[Any]) -> int:
    """Write the runs to ``out`` (a binary file); returns the number of rows written."""
    if fmt not in EXPORT_FORMATS:
        raise DlinfraError(f"unknown export format {fmt!r}", f"use one of {', '.join(EXPORT_FORMATS)}")
    frame = runs_frame(store, campaign_id)
    try:
        if fmt == "csv":
            frame.to_csv(out, index=False)
        else:
            frame.to_parquet(out, index=False)
    except OSError as exc:
        raise DlinfraError(f"cannot write {getattr(out, 'name', 'the output')}: {exc.strerror or exc}") from None
    return len(frame)
