"""Runs as a pandas DataFrame, and its CSV/Parquet export."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlinfra.errors import DlinfraError
from dlinfra.results.store import ResultsStore

EXPORT_FORMATS = ("csv", "parquet")


def runs_frame(store: ResultsStore, campaign_id: str | None = None, with_records: bool = False) -> pd.DataFrame:
    """One row per process per run; ``record_json`` (the full record) only when asked."""
    frame = pd.DataFrame(store.runs(campaign_id))
    if frame.empty:
        return frame
    frame["emulated"] = frame["emulated"].astype(bool)
    if not with_records:
        frame = frame.drop(columns=["record_json"])
    return frame


def export_runs(store: ResultsStore, campaign_id: str | None, fmt: str, out: Path) -> int:
    """Write the runs to ``out``; returns the number of rows written."""
    if fmt not in EXPORT_FORMATS:
        raise DlinfraError(f"unknown export format {fmt!r}", f"use one of {', '.join(EXPORT_FORMATS)}")
    frame = runs_frame(store, campaign_id)
    try:
        if fmt == "csv":
            frame.to_csv(out, index=False)
        else:
            frame.to_parquet(out, index=False)
    except OSError as exc:
        raise DlinfraError(f"cannot write {out}: {exc.strerror or exc}", "choose another --out") from None
    return len(frame)
