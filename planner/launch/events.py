"""The run loop's event log: one JSON object per line, appended and flushed as it happens, so
`tail -f` or a log shipper sees each event at once and a crash loses none that was written.

Every event has `time` (Unix seconds), `event` (round_start, round_end, plan, job_start,
job_end, job_failed, job_given_up, node_lost, node_back, run_start, run_stop, run_end, warning)
and its own fields; user strings (job ids, reasons) are JSON strings, never formatted in."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class EventLog:
    def __init__(self, path: Path, echo: Any = None) -> None:
        self.path = path
        self.echo = echo  # called with each event (the live view)
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_APPEND: each line lands whole at the end, also beside another writer; the umask decides who reads it
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"time": round(time.time(), 3), "event": event, **fields}
        os.write(self._fd, (json.dumps(record, default=str) + "\n").encode())
        if self.echo is not None:
            self.echo(record)
        return record

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
