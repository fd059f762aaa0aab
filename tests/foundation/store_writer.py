"""A second process writing to the store: concurrent writers, and the SIGKILL-mid-transaction test.

Usage: store_writer.py URL CAMPAIGN FIRST COUNT [--pause-in-cell N]
With --pause-in-cell, the writer stops forever halfway through storing cell N
(after its first run row is inserted), so the parent can SIGKILL it mid-transaction.
"""

from __future__ import annotations

import sys
import time

from records import make_record

import dlinfra.results.store as store_module
from dlinfra.results.store import CellOutcome, open_store


def main() -> None:
    url, campaign, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    pause_in = int(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[5] == "--pause-in-cell" else None
    store = open_store(url)
    store.add_campaign(campaign, campaign, {})
    for i in range(first, first + count):
        cell = {"workload": "mnist-dnn", "layer": "bm", "mode": "ps-async", "batch_size": i}
        records = [
            make_record(campaign, cell, role=r, task_index=t) for r, t in (("chief", 0), ("worker", 0), ("ps", 0))
        ]
        if i == pause_in:
            real_row, calls = store_module._run_row, []

            def pausing_row(record, *rest, real_row=real_row, calls=calls):  # type: ignore[no-untyped-def]
                calls.append(record)
                if len(calls) == 2:  # the first row of this cell is already inserted
                    print("PAUSED", flush=True)
                    time.sleep(3600)
                return real_row(record, *rest)

            store_module._run_row = pausing_row
        store.store_cell(
            CellOutcome(campaign, records[0].provenance.cell_hash, 0, "bm", "mnist-dnn", cell, "ok"), records
        )
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
