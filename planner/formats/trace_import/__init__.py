"""Public cluster traces as rota job lists: Gavel's msr traces, Philly, Helios, Alibaba PAI.

One module per format reads its files into `common.SourceJob`s (`gavel`, `philly`, `helios`,
`alibaba_pai`); `convert` filters them, orders them by arrival and sizes them against a
throughput table (`sizing`: GPU caps, job types drawn for traces that name none, steps).
docs/traces.md describes each format, its source and every option.
"""

from __future__ import annotations

from planner.formats.trace_import.common import ImportOptions, ImportSummary, SourceJob
from planner.formats.trace_import.convert import convert
from planner.formats.trace_import.sizing import Sizer

__all__ = ["ImportOptions", "ImportSummary", "Sizer", "SourceJob", "convert"]
