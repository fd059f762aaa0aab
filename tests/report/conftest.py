"""Fixtures of the report tests; the generators live in resultsets.py (importable as report.resultsets)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from report.resultsets import Campaign

from dlinfra.results.store import ResultsStore, open_store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "results.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[ResultsStore]:
    with open_store(str(db_path)) as s:
        yield s


@pytest.fixture
def campaign(store: ResultsStore) -> Callable[..., Campaign]:
    return lambda campaign_id="c1", name=None: Campaign(store, campaign_id, name)
