"""A grant's input read into shopper ids: a file (one id a line, or a CSV with a user_id column) or the API's
list. Pure: no database, no Redis. A refusal (FileRefused) comes before anything is granted."""
from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.auth import is_user_id

USER_ID_COLUMN = "user_id"
REJECTED_TEXT_MAX = 200  # characters of a rejected line kept for the operator's CSV


class FileRefused(ValueError):
    """The whole file is refused (another encoding, too large, a CSV without user_id): nothing was granted."""


@dataclass
class ReadIds:
    """What a grant's input holds: the valid ids in order (each once), and the rejected lines."""

    user_ids: list[str] = field(default_factory=list)
    lines: int = 0
    invalid: int = 0
    duplicate: int = 0
    rejected: list[tuple[int, str, str]] = field(default_factory=list)  # (line, text, "invalid" / "duplicate")
    digest: str = ""

    def rejected_csv(self) -> str:
        """The rejected lines as CSV: line,reason,text."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["line", "reason", "text"])
        for number, text, reason in self.rejected:
            writer.writerow([number, reason, text[:REJECTED_TEXT_MAX]])
        return out.getvalue()


def read_ids(values: Iterable[tuple[int, object, str]]) -> ReadIds:
    """Sort (line number, value, its text) into valid ids, invalid values (None: not even a value) and duplicates of
    an id seen earlier."""
    read = ReadIds()
    seen: set[str] = set()
    for number, value, text in values:
        read.lines += 1
        if not isinstance(value, str) or not is_user_id(value):
            read.invalid += 1
            read.rejected.append((number, text, "invalid"))
        elif value in seen:
            read.duplicate += 1
            read.rejected.append((number, value, "duplicate"))
        else:
            seen.add(value)
            read.user_ids.append(value)
    return read


def read_file(content: bytes, *, max_bytes: int) -> ReadIds:
    """Read a grant file: UTF-8 (a BOM allowed), one shopper id a line, or a CSV whose header names a user_id
    column. Blank lines are skipped; a line is taken as it is (no trimming: ids are checked as the tokens' are,
    core.auth). Raise FileRefused for a file over `max_bytes`, not UTF-8, or a CSV without a user_id column."""
    if len(content) > max_bytes:
        raise FileRefused(f"the file has {len(content):,} bytes, more than the {max_bytes:,} a grant takes")
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileRefused(f"the file is not UTF-8 (byte {exc.start + 1} is not): save it as UTF-8 and upload it "
                          "again") from None
    digest = hashlib.sha256(content).hexdigest()
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if "," in first or first.strip() == USER_ID_COLUMN:
        read = read_ids(_csv_values(lines, first))
    else:
        read = read_ids((n, line, line) for n, line in enumerate(lines, 1) if line.strip())
    read.digest = digest
    return read


def list_values(user_ids: list[object]) -> Iterable[tuple[int, object, str]]:
    """The API's list as read_ids() takes it (its position from 1 as the line)."""
    return ((n, value, value if isinstance(value, str) else repr(value)) for n, value in enumerate(user_ids, 1))


def _csv_values(lines: list[str], header_line: str) -> Iterable[tuple[int, object, str]]:
    header = next(csv.reader([header_line]))
    if USER_ID_COLUMN not in header:
        raise FileRefused(f"a CSV file needs a {USER_ID_COLUMN} column; its header is {header_line[:100]!r}")
    column = header.index(USER_ID_COLUMN)
    past_header = False
    for number, line in enumerate(lines, 1):
        if not past_header:
            past_header = line == header_line
            continue
        if not line.strip():
            continue
        try:
            row = next(csv.reader([line]))
        except csv.Error:  # not a CSV line: invalid
            row = []
        yield number, row[column] if len(row) > column else None, line
