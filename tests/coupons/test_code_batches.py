"""Unique codes in bulk (coupons.code_batches, issue 19): generation (exact, two writers at once, resumable after a
kill, two runs at once), the Celery task through a real worker, the CSV export, the all-or-nothing import, and
their commands."""
from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.utils import timezone

from core.errors import BadRequest
from coupons import code_batches
from coupons.code_batches import (
    CodesImportRefused,
    code_batch_create,
    code_batch_generate,
    code_batch_import,
    code_batch_send,
    unique_codes_csv,
)
from coupons.models import CodeBatch, CodeBatchSource, CodeBatchState, Coupon, UniqueCode
from coupons.unique_codes import canonical_unique_code, forget_imported_codes

from ..conftest import ROOT, process_env, run_twice_at_once, wait_for
from ..factories import CampaignFactory
from .code_helpers import batch_codes, codes_campaign, import_codes


@pytest.fixture(autouse=True)
def _fresh_imported_flag():
    forget_imported_codes()
    yield
    forget_imported_codes()


def assert_exact_batch(batch: CodeBatch, count: int) -> list[str]:
    """The batch is done with exactly `count` distinct codes of its prefix, each with a valid MAC."""
    batch.refresh_from_db()
    codes = batch_codes(batch)
    assert (batch.state, batch.inserted, batch.requested) == (CodeBatchState.DONE, count, count)
    assert len(codes) == count and len(set(codes)) == count
    assert all(canonical_unique_code(code) == code for code in codes)
    assert all(code.startswith(f"{batch.prefix}-") for code in codes) if batch.prefix else True
    return codes


# ---------------------------------------------------------------------------------------------------------
# Generation


@pytest.mark.django_db
def test_generation_makes_exactly_the_count_of_distinct_codes_with_the_prefix_kept() -> None:
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=25_000, prefix="spring", created_by="ann")
    seen: list[int] = []

    done = code_batch_generate(batch_id=batch.pk, chunk=4_000, progress=lambda b: seen.append(b.inserted))

    assert done.prefix == "SPRING" and done.finished_at is not None
    codes = assert_exact_batch(batch, 25_000)
    assert {len(code) for code in codes} == {len("SPRING-XXXX-XXXX-XXXX")}
    assert seen == [4_000, 8_000, 12_000, 16_000, 20_000, 24_000, 25_000]  # progress after every chunk
    assert UniqueCode.objects.filter(campaign=campaign, holder_id__isnull=True).count() == 25_000


@pytest.mark.django_db
def test_a_second_batch_gets_other_codes_and_a_done_batch_run_again_adds_nothing() -> None:
    campaign = codes_campaign()
    first = code_batch_create(campaign=campaign, count=3_000, created_by="ann")
    second = code_batch_create(campaign=campaign, count=3_000, created_by="ann")
    code_batch_generate(batch_id=first.pk)
    code_batch_generate(batch_id=second.pk)

    code_batch_generate(batch_id=first.pk)

    assert not set(assert_exact_batch(first, 3_000)) & set(assert_exact_batch(second, 3_000))
    assert UniqueCode.objects.count() == 6_000


@pytest.mark.django_db
@pytest.mark.parametrize(("fields", "count", "prefix", "message"), [
    ({"kind": "grab"}, 10, "", "grab campaign"),
    ({"code": "SAVE50"}, 10, "", "shared code SAVE50"),
    ({}, 0, "", "1 to 10,000,000"),
    ({}, 10_000_001, "", "1 to 10,000,000"),
    ({}, 10, "SPRING-2026", "prefix"),
    ({}, 10, "A" * 17, "prefix"),
])
def test_generation_refuses_a_campaign_count_or_prefix_it_cannot_take(fields, count, prefix, message) -> None:
    campaign = CampaignFactory(**{"kind": "codes", **fields})

    with pytest.raises(Exception, match=message):
        code_batch_create(campaign=campaign, count=count, prefix=prefix, created_by="ann")

    assert CodeBatch.objects.count() == 0


@pytest.mark.django_db
def test_generation_refuses_more_codes_than_the_sequence_has_left() -> None:
    campaign = codes_campaign()
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value, is_called FROM coupons_unique_code_serial")
        last_value, is_called = cursor.fetchone()
        cursor.execute("SELECT setval('coupons_unique_code_serial', 728999989)")  # 10 serials left
    try:
        with pytest.raises(Exception, match="only 10 more"):
            code_batch_create(campaign=campaign, count=11, created_by="ann")
        assert code_batch_create(campaign=campaign, count=10, created_by="ann").requested == 10
    finally:
        with connection.cursor() as cursor:  # sequences ignore the test's rollback
            cursor.execute("SELECT setval('coupons_unique_code_serial', %s, %s)", [last_value, is_called])


@pytest.mark.django_db
def test_an_error_mid_batch_marks_it_failed_with_its_chunks_kept_and_a_rerun_completes_it(monkeypatch) -> None:
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=10_000, prefix="X", created_by="ann")
    real, calls = code_batches.unique_codes, []

    def third_chunk_fails(prefix, serials):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("worker lost")
        return real(prefix, serials)

    monkeypatch.setattr(code_batches, "unique_codes", third_chunk_fails)
    with pytest.raises(RuntimeError):
        code_batch_generate(batch_id=batch.pk, chunk=1_000)
    batch.refresh_from_db()
    assert (batch.state, batch.inserted, batch.error) == (CodeBatchState.FAILED, 2_000, "RuntimeError: worker lost")
    assert UniqueCode.objects.filter(batch=batch).count() == 2_000

    monkeypatch.setattr(code_batches, "unique_codes", real)
    code_batch_generate(batch_id=batch.pk, chunk=1_000)

    assert_exact_batch(batch, 10_000)


def serials_taken() -> int:
    """How many serials the sequence has given so far (a chunk rolled back keeps its serials: a gap)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value, is_called FROM coupons_unique_code_serial")
        last_value, is_called = cursor.fetchone()
    return last_value + 1 if is_called else last_value


def open_transactions_of_others() -> int:
    """Backends of the test database, other than this test's, inside a transaction (a writer's open chunk)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_two_writers_report_progress_after_every_chunk_in_commit_order_in_the_callers_thread() -> None:
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=25_000, created_by="ann")
    seen: list[tuple[int, int]] = []

    code_batch_generate(batch_id=batch.pk, chunk=4_000, writers=2,
                        progress=lambda b: seen.append((b.inserted, threading.get_ident())))

    assert_exact_batch(batch, 25_000)
    counts = [inserted for inserted, _ in seen]
    assert counts == sorted(set(counts)) and counts[-1] == 25_000, counts  # once per chunk, in commit order
    assert sorted(b - a for a, b in zip([0, *counts], counts, strict=False)) == [1_000] + [4_000] * 6
    assert {ident for _, ident in seen} == {threading.get_ident()}


@pytest.mark.django_db(transaction=True)
def test_an_error_in_one_of_two_writers_stops_both_and_marks_the_batch_failed_with_its_chunks_kept(monkeypatch):
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=20_000, created_by="ann")
    real, calls, lock = code_batches.unique_codes, [], threading.Lock()

    def fifth_block_fails(prefix, serials):
        with lock:
            calls.append(1)
            fail = len(calls) == 5
        if fail:
            raise RuntimeError("worker lost")
        return real(prefix, serials)

    monkeypatch.setattr(code_batches, "unique_codes", fifth_block_fails)
    with pytest.raises(RuntimeError, match="worker lost"):
        code_batch_generate(batch_id=batch.pk, chunk=1_000, writers=2)  # raised in the caller's thread
    batch.refresh_from_db()
    assert (batch.state, batch.error) == (CodeBatchState.FAILED, "RuntimeError: worker lost")
    assert 0 < batch.inserted < 20_000 and UniqueCode.objects.filter(batch=batch).count() == batch.inserted

    monkeypatch.setattr(code_batches, "unique_codes", real)
    code_batch_generate(batch_id=batch.pk, chunk=1_000)

    assert_exact_batch(batch, 20_000)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_generating_process_killed_mid_batch_is_resumed_to_the_exact_count_without_duplicates() -> None:
    # Given codes_generate running in its own process, SIGKILLed with its two writers each inside a chunk, once
    # some chunks are committed
    campaign = codes_campaign()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "codes_generate", str(campaign.pk), "--count", "400000", "--chunk", "2000"],
        cwd=ROOT, env=process_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        batch = wait_for(lambda: open_transactions_of_others() == 2
                         and CodeBatch.objects.filter(campaign=campaign, inserted__gte=20_000).first(),
                         timeout=60, interval=0.01, what="20,000 codes committed, two chunks open")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(10)
    batch.refresh_from_db()
    assert batch.state == CodeBatchState.RUNNING and 20_000 <= batch.inserted < 400_000, batch.inserted
    assert UniqueCode.objects.filter(batch=batch).count() == batch.inserted  # committed chunks only

    # When the operator resumes it
    out = io.StringIO()
    call_command("codes_generate", str(campaign.pk), "--resume", str(batch.pk), stdout=out, stderr=io.StringIO())

    # Then it has exactly the count asked for, all distinct
    assert out.getvalue().strip() == f'{{"batch": {batch.pk}, "count": 400000}}'
    assert_exact_batch(batch, 400_000)


@pytest.mark.django_db(transaction=True)
def test_two_runs_of_one_batch_at_once_make_the_exact_count() -> None:
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=30_000, created_by="ann")

    done = run_twice_at_once(lambda: code_batch_generate(batch_id=batch.pk, chunk=1_000))  # two writers each

    assert [b.inserted for b in done] == [30_000, 30_000]
    assert_exact_batch(batch, 30_000)


@pytest.mark.django_db(transaction=True)
def test_a_chunk_that_no_longer_fits_is_rolled_back_and_the_count_stays_exact(monkeypatch) -> None:
    # Given a run of a batch whose first chunk is being made when a second run of the batch fills it whole
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=12_000, created_by="ann")
    real, second = code_batches.unique_codes, []

    def second_run_fills_the_batch(prefix, serials):
        if not second:
            second.append(None)
            thread = threading.Thread(target=lambda: run_and_close(
                lambda: second.append(code_batch_generate(batch_id=batch.pk, chunk=4_000))))
            thread.start()
            thread.join()
        return real(prefix, serials)

    monkeypatch.setattr(code_batches, "unique_codes", second_run_fills_the_batch)
    taken = serials_taken()

    # When the first run goes on
    first = code_batch_generate(batch_id=batch.pk, chunk=4_000)

    # Then its chunk was rolled back (its serials are a gap) and the batch has exactly its count
    assert (first.inserted, second[1].inserted) == (12_000, 12_000)
    assert serials_taken() - taken >= 12_000 + 4_000
    assert_exact_batch(batch, 12_000)


def run_and_close(job) -> None:
    try:
        job()
    finally:
        connections.close_all()  # this thread's own connection


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_batch_sent_to_a_real_celery_worker_is_generated_there() -> None:
    # Given a running Celery worker on the test broker
    campaign = codes_campaign()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--concurrency", "1", "--pool", "solo",
         "-l", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=process_env(),
    )
    try:
        # When a batch is recorded and sent by name, and another through codes_generate --worker
        batch = code_batch_create(campaign=campaign, count=20_000, prefix="W", created_by="ann")
        code_batch_send(batch=batch)  # autocommit: sent at once
        out, err = io.StringIO(), io.StringIO()
        call_command("codes_generate", str(campaign.pk), "--count", "5000", "--worker", stdout=out, stderr=err)

        # Then the worker fills both, and the command followed its batch to the end
        wait_for(lambda: CodeBatch.objects.get(pk=batch.pk).state == CodeBatchState.DONE, timeout=60,
                 interval=0.2, what="the worker's batch")
    finally:
        worker.terminate()
        worker.wait(30)
    assert CodeBatch.objects.get(pk=batch.pk).task_id
    assert_exact_batch(batch, 20_000)
    followed = CodeBatch.objects.exclude(pk=batch.pk).get()
    assert out.getvalue().strip() == f'{{"batch": {followed.pk}, "count": 5000}}' and followed.task_id
    assert_exact_batch(followed, 5_000)


@pytest.mark.django_db
def test_codes_generate_prints_progress_and_one_json_line() -> None:
    campaign = codes_campaign()
    out, err = io.StringIO(), io.StringIO()

    call_command("codes_generate", str(campaign.pk), "--count", "5000", "--prefix", "fall", stdout=out, stderr=err)

    batch = CodeBatch.objects.get()
    assert out.getvalue().strip() == f'{{"batch": {batch.pk}, "count": 5000}}'
    assert f"batch {batch.pk}: 5,000 / 5,000 codes (100%)" in err.getvalue()
    assert_exact_batch(batch, 5_000)
    with pytest.raises(CommandError, match="shared code"):
        call_command("codes_generate", str(CampaignFactory(kind="codes", code="SAVE50").pk), "--count", "5")


# ---------------------------------------------------------------------------------------------------------
# Export


def hold(code: UniqueCode, *, user_id: str, status: str) -> None:
    """Bind a code to a shopper's coupon of that status (as the use path does)."""
    now = timezone.now()
    coupon = Coupon.objects.create(
        code=code.code, campaign=code.campaign, user_id=user_id, claim_id=f"code:{code.code}", status=status,
        valid_from=now, expires_at=now + timedelta(days=1),
        order_id="o-1" if status in ("held", "redeemed") else None,
        hold_until=now + timedelta(minutes=10) if status == "held" else None,
    )
    UniqueCode.objects.filter(pk=code.pk).update(holder_id=user_id, coupon=coupon, held_at=now)


@pytest.mark.django_db
def test_export_gives_every_code_once_with_its_status_holder_and_batch_in_pages() -> None:
    campaign, other = codes_campaign(), codes_campaign()
    first = code_batch_create(campaign=campaign, count=50, created_by="ann")
    second = code_batch_create(campaign=campaign, count=30, prefix="B", created_by="ann")
    elsewhere = code_batch_create(campaign=other, count=20, created_by="ann")
    for batch in (first, second, elsewhere):
        code_batch_generate(batch_id=batch.pk)
    codes = list(UniqueCode.objects.filter(batch=first).order_by("id")[:3])
    hold(codes[0], user_id="ann", status="redeemed")
    hold(codes[1], user_id="bob, jr", status="held")

    text = "".join(unique_codes_csv(campaign_id=campaign.pk, page=7))
    rows = list(csv.reader(io.StringIO(text)))

    assert rows[0] == ["code", "status", "holder", "batch"]
    assert len(rows) == 81 and len({r[0] for r in rows[1:]}) == 80
    assert {r[0] for r in rows[1:]} == set(batch_codes(first)) | set(batch_codes(second))
    by_code = {r[0]: r[1:] for r in rows[1:]}
    assert by_code[codes[0].code] == ["redeemed", "ann", str(first.pk)]
    assert by_code[codes[1].code] == ["held", "bob, jr", str(first.pk)]  # quoted: a comma in a holder
    assert by_code[codes[2].code] == ["unused", "", str(first.pk)]
    only_second = list(csv.reader(io.StringIO("".join(unique_codes_csv(campaign_id=campaign.pk,
                                                                       batch_id=second.pk)))))
    assert {r[0] for r in only_second[1:]} == set(batch_codes(second)) and len(only_second) == 31


@pytest.mark.django_db
def test_codes_export_writes_the_csv_on_stdout() -> None:
    campaign = codes_campaign()
    batch = code_batch_create(campaign=campaign, count=12, created_by="ann")
    code_batch_generate(batch_id=batch.pk)
    out = io.StringIO()

    call_command("codes_export", str(campaign.pk), "--batch", str(batch.pk), stdout=out, stderr=io.StringIO())

    lines = out.getvalue().splitlines()
    assert lines[0] == "code,status,holder,batch" and len(lines) == 13
    assert lines[1].endswith(f",unused,,{batch.pk}")


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["grab", "shared"])
def test_codes_export_refuses_a_campaign_without_unique_codes(kind) -> None:
    # Given a grab campaign, or a codes campaign with a shared code (codes_generate and codes_import refuse both)
    campaign = CampaignFactory() if kind == "grab" else CampaignFactory(kind="codes", code="SAVE50")

    # When an operator exports its codes, Then it is refused (it was an empty CSV and exit 0)
    out = io.StringIO()
    with pytest.raises(CommandError, match="grab campaign|shared code"):
        call_command("codes_export", str(campaign.pk), stdout=out, stderr=io.StringIO())
    assert out.getvalue() == ""


# ---------------------------------------------------------------------------------------------------------
# Import


@pytest.mark.django_db
def test_an_import_with_bad_lines_and_duplicates_changes_nothing_and_reports_every_line() -> None:
    campaign = codes_campaign()
    CampaignFactory(kind="codes", code="SAVE50")
    existing = import_codes(campaign, ["OLD-0001"])
    generated = code_batch_create(campaign=campaign, count=1, created_by="ann")
    code_batch_generate(batch_id=generated.pk)
    ours = batch_codes(generated)[0]
    before = set(UniqueCode.objects.values_list("code", flat=True))
    lines = ["good-0001\n", "ab\n", "\n", "GOOD-0001\n", "old-0001\n", "bad code!\n", "save50\n", f"{ours}\n",
             "X" * 41 + "\n", "GOOD-0002\n"]

    with pytest.raises(CodesImportRefused) as refused:
        code_batch_import(campaign=campaign, lines=lines, created_by="ann")

    assert [str(p) for p in refused.value.problems] == [
        "line 2: 'ab': not 4-40 of A-Z, 0-9 and '-'",
        "line 4: 'GOOD-0001': duplicate of line 1",
        "line 5: 'OLD-0001': already exists",
        "line 6: 'bad code!': not 4-40 of A-Z, 0-9 and '-'",
        "line 7: 'SAVE50': already exists",
        f"line 8: '{ours}': has the form of a generated code: generate codes instead",
        f"line 9: '{'X' * 41}': not 4-40 of A-Z, 0-9 and '-'",
    ]
    assert set(UniqueCode.objects.values_list("code", flat=True)) == before
    assert list(CodeBatch.objects.filter(source=CodeBatchSource.IMPORTED)) == [existing]


@pytest.mark.django_db
def test_a_good_import_inserts_every_code_in_one_done_batch() -> None:
    campaign = codes_campaign()
    lines = [f" legacy-{i:05d} \r\n" for i in range(25_000)]

    batch = code_batch_import(campaign=campaign, lines=lines, created_by="ann")

    assert (batch.source, batch.state, batch.requested, batch.inserted) == ("imported", "done", 25_000, 25_000)
    assert set(batch_codes(batch)) == {f"LEGACY-{i:05d}" for i in range(25_000)}


@pytest.mark.django_db
def test_a_lists_header_line_and_a_byte_order_mark_are_not_codes() -> None:
    campaign = codes_campaign()

    batch = code_batch_import(campaign=campaign, lines=["\ufeffCode\r\n", "legacy-a1\n", "\n", "LEGACY-B2\n"],
                              created_by="ann")

    assert sorted(batch_codes(batch)) == ["LEGACY-A1", "LEGACY-B2"]
    with pytest.raises(BadRequest, match="no code in the file"):
        code_batch_import(campaign=campaign, lines=["\ufeff"], created_by="ann")


@pytest.mark.django_db
def test_the_exports_csv_imports_into_another_campaign(tmp_path) -> None:
    source, target = codes_campaign(), codes_campaign()
    import_codes(source, ["AAAA-1", "BBBB-2"])
    exported = "".join(unique_codes_csv(campaign_id=source.pk))
    UniqueCode.objects.filter(campaign=source).delete()  # a legacy system's file: same codes, now moved
    path = tmp_path / "codes.csv"
    path.write_text(exported)
    out = io.StringIO()

    call_command("codes_import", str(target.pk), str(path), stdout=out, stderr=io.StringIO())

    assert set(UniqueCode.objects.filter(campaign=target).values_list("code", flat=True)) == {"AAAA-1", "BBBB-2"}
    assert '"count": 2' in out.getvalue()


@pytest.mark.django_db
def test_codes_import_lists_each_bad_line_and_fails(tmp_path) -> None:
    campaign = codes_campaign()
    path = tmp_path / "codes.txt"
    path.write_text("GOOD-1\nno\nGOOD-1\n")
    err = io.StringIO()

    with pytest.raises(CommandError, match="nothing imported: 2 bad line"):
        call_command("codes_import", str(campaign.pk), str(path), stderr=err)

    assert err.getvalue().splitlines() == ["line 2: 'no': not 4-40 of A-Z, 0-9 and '-'",
                                           "line 3: 'GOOD-1': duplicate of line 1"]
    assert UniqueCode.objects.count() == 0


def test_codes_import_exits_non_zero_on_a_bad_file(transactional_db, tmp_path) -> None:
    campaign = codes_campaign()
    path = tmp_path / "codes.txt"
    path.write_text("GOOD-1\nno\n")

    result = subprocess.run([sys.executable, "manage.py", "codes_import", str(campaign.pk), str(path)], cwd=ROOT,
                            env=process_env(), capture_output=True, text=True, timeout=60)

    assert result.returncode == 1 and "line 2: 'no'" in result.stderr and result.stdout == ""
    assert UniqueCode.objects.count() == 0


@pytest.mark.django_db
def test_the_codes_table_pays_no_per_row_foreign_key_check_nor_a_second_code_index() -> None:
    # coupons 0010: the bulk insert's per-row costs (bench/codes_bench.py); the code compares bytewise
    with connection.cursor() as cursor:
        cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'coupons_uniquecode'::regclass "
                       "AND contype = 'f'")
        foreign_keys = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'coupons_uniquecode'")
        indexes = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT collation_name FROM information_schema.columns WHERE table_name = "
                       "'coupons_uniquecode' AND column_name = 'code'")
        collation = cursor.fetchone()[0]

    assert [name for name in foreign_keys if "coupon_id" not in name] == []  # the coupon's is kept (rare write)
    assert [i for i in indexes if "(code" in i] == [i for i in indexes if "UNIQUE" in i and "(code)" in i]
    assert len([i for i in indexes if "(code" in i]) == 1 and collation == "C"
