"""Unique codes in bulk (issue 19): generate a batch (resumable, in chunks), import legacy codes (all or nothing),
export a campaign's or a batch's codes as CSV (streamed).

Generation never checks before it inserts: every code is built from a serial of the PostgreSQL sequence
`coupons_unique_code_serial` (coupons.unique_codes), so two codes never collide. A chunk is one transaction:
it takes its serials (`nextval` over `generate_series`), COPYs the codes and, at its end, adds them to the
batch's `inserted` counter only if they still fit (`inserted + n <= requested`; else the chunk is rolled back).
Two writers (threads of the worker, a connection each) commit chunks at once, so that PostgreSQL works on both
cores. A worker killed mid-batch loses only its open chunks' transactions (and their serials, a gap in the
sequence); a rerun reads `inserted` and makes exactly the codes still missing. Two runs of one batch at once
both write, and the counter's condition keeps the count exact.
"""
from __future__ import annotations

import copy
import csv
import io
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import F, Sum
from django.utils import timezone
from django.utils.translation import gettext, ngettext

from campaigns.models import Campaign, CampaignKind
from core.errors import BadRequest, Conflict

from .models import CodeBatch, CodeBatchSource, CodeBatchState, Coupon, UniqueCode
from .unique_codes import (
    IMPORTED_CODE_RE,
    PREFIX_RE,
    SERIALS,
    canonical_unique_code,
    forget_imported_codes,
    in_code_order,
    unique_codes,
)

GENERATE_TASK = "coupons.tasks.code_batch_generate"
MAX_COUNT = 10_000_000  # codes per batch (generated) or lines per file (imported)
# Codes per transaction: ~0.1 s of a writer's work, so progress moves several times a second and a killed worker
# loses at most that much per writer (bench/codes_bench.py).
CHUNK = 10_000
COPY_BLOCK = 1_000  # codes per write() into a COPY
# Writers per batch: threads of the worker's process, each with its own connection, committing their own chunks,
# so that two PostgreSQL backends (two cores) insert while the worker builds codes: 1.3-1.6x the codes/s of one
# writer; a third writer is within the noise (bench/codes_bench.py, docs/benchmarks.md).
WRITERS = 2
EXPORT_PAGE = 10_000
EXPORT_HEADER = ["code", "status", "holder", "batch"]
_COPY = "COPY coupons_uniquecode (code, campaign_id, batch_id) FROM STDIN"  # created_at: the database's


def check_codes_campaign(campaign: Campaign) -> None:
    """Refuse a campaign that cannot hold unique codes (a grab campaign, or one with a shared code)."""
    if campaign.kind != CampaignKind.CODES:
        raise Conflict(gettext("%(campaign)s is a grab campaign: unique codes belong to codes campaigns.")
                       % {"campaign": campaign})
    if campaign.code:
        raise Conflict(gettext("%(campaign)s has the shared code %(code)s: unique codes need a campaign without one.")
                       % {"campaign": campaign, "code": campaign.code})


def check_prefix(prefix: str) -> str:
    """Return the prefix upper-cased; refuse one that is not 1-16 of [A-Z0-9] (empty: no prefix)."""
    prefix = prefix.strip().upper()
    if prefix and not PREFIX_RE.fullmatch(prefix):
        raise BadRequest(gettext("prefix: 1-16 letters and digits, got %(prefix)s") % {"prefix": repr(prefix)})
    return prefix


def serials_left() -> int:
    """Return how many serials the sequence can still give, less those promised to unfinished batches."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value, is_called FROM coupons_unique_code_serial")
        last_value, is_called = cursor.fetchone()
    promised = CodeBatch.objects.filter(
        source=CodeBatchSource.GENERATED, state__in=[CodeBatchState.PENDING, CodeBatchState.RUNNING,
                                                     CodeBatchState.FAILED]
    ).aggregate(n=Sum(F("requested") - F("inserted")))["n"] or 0
    return SERIALS - (last_value + 1 if is_called else last_value) - promised


def code_batch_create(*, campaign: Campaign, count: int, prefix: str = "", created_by: str) -> CodeBatch:
    """Validate and record a pending batch of `count` codes for the campaign (code_batch_generate fills it)."""
    check_codes_campaign(campaign)
    prefix = check_prefix(prefix)
    if not 1 <= count <= MAX_COUNT:
        raise BadRequest(gettext("count: 1 to %(max)s codes, got %(count)s")
                         % {"max": f"{MAX_COUNT:,}", "count": f"{count:,}"})
    left = serials_left()
    if count > left:
        raise Conflict(gettext("count: only %(left)s more unique codes can be generated (the serials' capacity).")
                       % {"left": f"{max(left, 0):,}"})
    return CodeBatch.objects.create(campaign=campaign, source=CodeBatchSource.GENERATED, prefix=prefix,
                                    requested=count, created_by=created_by[:150])


def code_batch_send(*, batch: CodeBatch) -> None:
    """Have a Celery worker fill the batch, once the current transaction commits (sent by name)."""

    def send() -> None:
        result = current_app.send_task(GENERATE_TASK, args=[batch.pk], ignore_result=True)
        CodeBatch.objects.filter(pk=batch.pk).update(task_id=result.id or "")

    transaction.on_commit(send)


def code_batch_generate(*, batch_id: int, chunk: int = CHUNK, writers: int = WRITERS,
                        progress: Callable[[CodeBatch], None] | None = None) -> CodeBatch:
    """Fill a generated batch up to its requested count, one committed chunk at a time; return it done.

    `writers` threads of this process (each with its own connection) make and commit chunks at once; in a
    transaction (a test's) the caller's connection writes alone, since no other could see its rows. A chunk
    counts itself into the batch's `inserted` at its end, only if it still fits (`inserted + n <= requested`),
    else it is rolled back: the count is exact however many runs fill one batch at once. Safe to rerun after a
    crash (it continues from the batch's `inserted`). `progress` is called in this thread after each chunk, in
    the order they committed. On an error the batch is marked failed (with the error) and the error raised; a
    rerun resumes it.
    """
    if not CodeBatch.objects.filter(pk=batch_id, source=CodeBatchSource.GENERATED).exists():
        raise BadRequest(gettext("no generated batch %(id)s") % {"id": batch_id})
    writers = 1 if connection.in_atomic_block else max(writers, 1)
    try:
        while True:
            batch = CodeBatch.objects.get(pk=batch_id)
            if batch.inserted >= batch.requested:
                if batch.state != CodeBatchState.DONE:
                    CodeBatch.objects.filter(pk=batch_id).exclude(state=CodeBatchState.DONE).update(
                        state=CodeBatchState.DONE, error="", finished_at=timezone.now())
                    batch.refresh_from_db()
                return batch
            _fill(batch, chunk, writers, progress)  # until done, or until a chunk no longer fits: then read again
    except Exception as exc:
        CodeBatch.objects.filter(pk=batch_id).exclude(state=CodeBatchState.DONE).update(
            state=CodeBatchState.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000])
        raise


class _Share:
    """What a fill of a batch still has to make, handed to its writers a chunk at a time; `in_order` is held
    from a chunk's count to its report, so reports come in commit order."""

    def __init__(self, left: int) -> None:
        self.left, self.lock, self.in_order = left, threading.Lock(), threading.Lock()

    def take(self, chunk: int) -> int:
        with self.lock:
            n = min(chunk, self.left)
            self.left -= n
            return n

    def stop(self) -> None:
        with self.lock:
            self.left = 0


def _fill(batch: CodeBatch, chunk: int, writers: int, progress: Callable[[CodeBatch], None] | None) -> None:
    """Make the batch's missing codes with `writers` writers (1: in this thread, on its connection)."""
    share = _Share(batch.requested - batch.inserted)

    def report(inserted: int) -> None:
        if progress is not None:
            snapshot = copy.copy(batch)
            snapshot.inserted, snapshot.state, snapshot.error = inserted, CodeBatchState.RUNNING, ""
            progress(snapshot)

    if writers == 1:
        _write_chunks(batch, share, chunk, report)
        return
    reports: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            _write_chunks(batch, share, chunk, reports.put)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            share.stop()
            errors.append(exc)
        finally:
            connections.close_all()  # this thread's own connection
            reports.put(None)

    threads = [threading.Thread(target=writer, name=f"codes-{batch.pk}-{i}", daemon=True) for i in range(writers)]
    try:
        for thread in threads:
            thread.start()
        running = writers
        while running:
            inserted = reports.get()
            if inserted is None:
                running -= 1
            else:
                report(inserted)
    finally:
        share.stop()  # a failed report, or Ctrl-C: the writers end their chunk and stop
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]


# A chunk's count, at its end: only if it still fits (READ COMMITTED: the condition is checked again on the row
# as the writer that held it last committed it). The row lock it takes is held only until the chunk commits.
_COUNT = ("UPDATE coupons_codebatch SET inserted = inserted + %(n)s, state = %(running)s, error = '' "
          "WHERE id = %(batch)s AND inserted + %(n)s <= requested RETURNING inserted")


def _write_chunks(batch: CodeBatch, share: _Share, chunk: int, report: Callable[[int], None]) -> None:
    """Commit chunks of the batch's codes (one transaction each) on this thread's connection while the share
    lasts; report the batch's count after each. A chunk that no longer fits (another run filled the batch
    meanwhile) is rolled back and ends the share."""
    while n := share.take(chunk):
        counted, ordered = None, False
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT nextval('coupons_unique_code_serial') FROM generate_series(1, %s)", [n])
                    serials = [row[0] for row in cursor.fetchall()]
                    _copy_codes(cursor, _generated_blocks(batch.prefix, serials), batch)
                    share.in_order.acquire()
                    ordered = True
                    cursor.execute(_COUNT, {"n": n, "batch": batch.pk, "running": CodeBatchState.RUNNING.value})
                    counted = cursor.fetchone()
                if counted is None:
                    transaction.set_rollback(True)
            if counted is None:
                share.stop()
                return
            report(counted[0])
        finally:
            if ordered:
                share.in_order.release()


def _copy_codes(cursor: Any, blocks: Iterable[list[str]], batch: CodeBatch) -> None:
    """COPY the codes into the batch: blocks of tab-separated text (no tab or backslash can occur in a code)."""
    tail = f"\t{batch.campaign_id}\t{batch.pk}\n"
    with cursor.cursor.copy(_COPY) as stream:  # psycopg 3's cursor under Django's wrapper
        for block in blocks:
            stream.write(tail.join(block) + tail)


def _generated_blocks(prefix: str, serials: list[int]) -> Iterator[list[str]]:
    """Yield the codes of the serials in blocks of COPY_BLOCK, in ascending code order.

    Made block by block while the COPY runs: PostgreSQL inserts one block while this process builds the next
    (the two overlap instead of taking turns). In code order: the unique index's B-tree is then filled from left
    to right, not at random (bench/codes_bench.py: both ~25% of the time a code).
    """
    ordered = in_code_order(serials)
    for i in range(0, len(ordered), COPY_BLOCK):
        yield unique_codes(prefix, ordered[i : i + COPY_BLOCK])


# ---------------------------------------------------------------------------------------------------------
# Import


@dataclass(frozen=True)
class ImportProblem:
    line: int
    text: str
    problem: str

    def __str__(self) -> str:
        return gettext("line %(line)s: %(text)s: %(problem)s") % {"line": self.line, "text": repr(self.text),
                                                                  "problem": self.problem}


class CodesImportRefused(BadRequest):
    """An import with at least one bad line: nothing was imported; `problems` lists every bad line."""

    def __init__(self, problems: list[ImportProblem]) -> None:
        super().__init__(ngettext("nothing imported: %(count)s bad line", "nothing imported: %(count)s bad lines",
                                  len(problems)) % {"count": len(problems)})
        self.problems = problems


def _import_lines(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """Yield (line number, code text) of a file of one code a line (its first line may be the header `code`),
    or of the export's CSV (its header first). A byte order mark before the first line is not part of it."""
    is_csv = None
    for number, line in enumerate(lines, start=1):
        if number == 1:
            line = line.lstrip("\ufeff")
        if not line.strip():
            continue
        if is_csv is None:
            header = line.strip().lower()
            is_csv = header == ",".join(EXPORT_HEADER)
            if is_csv or header == EXPORT_HEADER[0]:  # a hand-made list's header, never a code of ours
                continue
        if is_csv:
            fields = next(csv.reader([line]), [])
            yield number, fields[0] if fields else ""
        else:
            yield number, line


def code_batch_import(*, campaign: Campaign, lines: Iterable[str], created_by: str) -> CodeBatch:
    """Import legacy codes, all or nothing: every line valid (4-40 of [A-Z0-9-], upper-cased, trimmed), none
    twice in the file, none already a code (unique, coupon or shared); else CodesImportRefused listing every
    bad line, and nothing is written. Blank lines are skipped."""
    check_codes_campaign(campaign)
    problems: list[ImportProblem] = []
    first_line: dict[str, int] = {}
    for number, raw in _import_lines(lines):
        text = raw.strip().upper()
        if not text:
            continue
        if not IMPORTED_CODE_RE.fullmatch(text):
            problems.append(ImportProblem(number, raw.strip()[:60], gettext("not 4-40 of A-Z, 0-9 and '-'")))
        elif text in first_line:
            problems.append(ImportProblem(number, text,
                                          gettext("duplicate of line %(line)s") % {"line": first_line[text]}))
        elif canonical_unique_code(text) is not None:
            problems.append(ImportProblem(number, text,
                                          gettext("has the form of a generated code: generate codes instead")))
        else:
            first_line[text] = number
        if len(first_line) + len(problems) > MAX_COUNT:
            raise BadRequest(gettext("a file of at most %(max)s codes") % {"max": f"{MAX_COUNT:,}"})
    codes = list(first_line)
    for existing in _existing_codes(codes):
        problems.append(ImportProblem(first_line[existing], existing, gettext("already exists")))
    if not codes and not problems:
        raise BadRequest(gettext("no code in the file"))
    if problems:
        raise CodesImportRefused(sorted(problems, key=lambda p: p.line))
    try:
        with transaction.atomic():
            batch = CodeBatch.objects.create(
                campaign=campaign, source=CodeBatchSource.IMPORTED, requested=len(codes), inserted=len(codes),
                state=CodeBatchState.DONE, created_by=created_by[:150], finished_at=timezone.now())
            with connection.cursor() as cursor:
                _copy_codes(cursor, (codes[i : i + COPY_BLOCK] for i in range(0, len(codes), COPY_BLOCK)), batch)
    except IntegrityError as exc:  # a code added by someone else since the check above
        raise Conflict(
            gettext("a code of the file was added meanwhile; nothing imported, import the file again")) from exc
    forget_imported_codes()
    return batch


def _existing_codes(codes: list[str]) -> Iterator[str]:
    """Yield the codes that are already a unique code, a coupon's code or a shared code (any case)."""
    for i in range(0, len(codes), CHUNK):
        part = codes[i : i + CHUNK]
        yield from UniqueCode.objects.filter(code__in=part).values_list("code", flat=True)
        yield from Coupon.objects.filter(code__in=part).values_list("code", flat=True)
        yield from (code for code in Campaign.objects.filter(code__in=part).values_list("code", flat=True) if code)


# ---------------------------------------------------------------------------------------------------------
# Export


_EXPORT_SQL = """
SELECT u.id, u.code, COALESCE(c.status, 'unused'), COALESCE(u.holder_id, '')
FROM coupons_uniquecode u LEFT JOIN coupons_coupon c ON c.id = u.coupon_id
WHERE u.campaign_id = %s AND u.batch_id = %s AND u.id > %s ORDER BY u.id LIMIT %s
"""


def unique_codes_csv(*, campaign_id: int, batch_id: int | None = None, page: int = EXPORT_PAGE) -> Iterator[str]:
    """Yield the CSV (code,status,holder,batch) of a campaign's codes, or of one of its batches, a page at a time.

    Batch by batch, each in keyset pages (id > the last id, on the index unique_code_export): constant memory,
    and every page is its own short query, so the stream may be consumed in any thread and for as long as the
    client reads. status is 'unused' while nobody holds a code, else its coupon's status.
    """
    batches = [batch_id] if batch_id is not None else list(
        CodeBatch.objects.filter(campaign_id=campaign_id).order_by("pk").values_list("pk", flat=True))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(EXPORT_HEADER)
    yield out.getvalue()
    for batch in batches:
        last = 0
        while True:
            with connection.cursor() as cursor:
                cursor.execute(_EXPORT_SQL, [campaign_id, batch, last, page])
                rows = cursor.fetchall()
            if not rows:
                break
            out.seek(0)
            out.truncate()
            writer.writerows((code, status, holder, batch) for _, code, status, holder in rows)
            last = rows[-1][0]
            yield out.getvalue()

