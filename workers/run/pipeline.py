"""The run pipeline: claim → fetch → load → generate (streamed encode + decode pass) → validate →
upload → record. Every ending goes through one of three transitions, and a failed run still keeps
its output and RunReport for inspection.

The run also keeps its card group's books (``workers.card_group``): the claim takes the job off the
group's next-job slot, the ledger follows the run (loading, generating, finishing), the card is
handed its next job the moment generation ends, and the final transition records the card-seconds
the attempt used and the speed it measured, in the same transaction.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from jobservice.broker import DispatchDecision, JobMessage
from jobservice.catalog import ModelSpec
from jobservice.db.tables import Job, JobStatus, Stage, utcnow
from jobservice.fleet import card_groups
from jobservice.fleet import costs as fleet_costs
from jobservice.fleet.usage import Phases, record_attempt
from jobservice.jobs import previews, retries
from jobservice.jobs.reaper import hand_back
from jobservice.jobs.transitions import (
    Owner,
    claim_job,
    mark_canceled,
    mark_failed,
    mark_succeeded,
    retry_with_next_seed,
)
from jobservice.logs import job_log_context
from jobservice.nightly.measure import measured_alone
from jobservice.reports.run_report import HostActivity, RunReport, Validation
from jobservice.tracing import JobSpan
from workers.adapters.base import AdapterError, JobCanceled, JobInputs, RunOutput
from workers.card_health import CardHealth
from workers.devices import memory_report, reset_peak_memory
from workers.host_activity import HostWindow
from workers.run.context import LeaseLostError, PipelineContext
from workers.run.heartbeat import Heartbeat
from workers.run.preview import PreviewPublisher
from workers.run.report import build_report, failed_check_message, validation_summary
from workers.run.tail import expectation_of, store_output, summary_timings, write_final
from workers.runtime import WorkerRuntime
from workers.validation import validate_file, validate_streamed

log = logging.getLogger(__name__)


def run_job(runtime: WorkerRuntime, message: JobMessage) -> str:
    """Run the job named by a queue message; returns how it ended (for logs and tests)."""
    job_id = message.job_id
    settings = runtime.services.settings
    quiet = wait_for_quiet(runtime, job_id)
    with runtime.services.db.session() as session:
        job = claim_job(
            session,
            job_id,
            worker_id=runtime.worker_id,
            lease_seconds=settings.lease_seconds,
            group=runtime.node,
        )
        if job is not None:
            card_groups.take_job(session, runtime.node, job.id, model=job.model)
    if job is None:
        if hand_back(runtime.services.db, job_id, runtime.node):
            # Still queued for this group: the group refused it (draining, or a card unhealthy).
            log.warning("job %s: this group takes no job now; handed back to the dispatcher", job_id)
        else:
            log.info("job %s: not queued for this group any more (taken, canceled, handed back)", job_id)
        runtime.member.dispatch()  # the group's slot was this job's: give it another (or the job elsewhere)
        return "dropped"
    if quiet is None:  # nothing was in hand: only a batch's job may be measured undisturbed
        undisturbed, waited_ms = job.batch_id is not None and read_measured(runtime, job_id), 0.0
    else:
        undisturbed, waited_ms = quiet
    with job_log_context(job_id, job.attempts):
        log.info("job %s: claimed by %s (attempt %d)", job_id, runtime.worker_id, job.attempts)
        run = JobRun(runtime, job, decision=message.decision, undisturbed=undisturbed, waited_ms=waited_ms)
        return run.execute()


def wait_for_quiet(runtime: WorkerRuntime, job_id: uuid.UUID) -> tuple[bool, float] | None:
    """A batch job measured undisturbed (jobservice/nightly/measure.py) waits, before its claim,
    until this worker has finished its earlier jobs: (whether it is one, how long it waited in ms).
    None when the worker has nothing in hand (its finisher idle, or none): there is nothing to wait
    for, and whether the job is measured undisturbed is read after its claim, only if it belongs to
    a batch (a job submitted on its own reaches its claim with no read of its own).

    Before the claim, so the card's ledger shows the wait as the earlier job's finishing and the
    measured job is not charged for it; only this thread hands work to the finisher, so it stays
    idle until the job's own generation ends.
    """
    finisher = runtime.finisher
    if finisher is None or finisher.idle:
        return None
    if not read_measured(runtime, job_id):
        return False, 0.0
    started = time.perf_counter()
    finisher.drain()
    waited = (time.perf_counter() - started) * 1000
    log.info("job %s: waited %.0f ms for the worker's earlier jobs to finish", job_id, waited)
    return True, waited


def read_measured(runtime: WorkerRuntime, job_id: uuid.UUID) -> bool:
    """Whether ``job_id`` is measured undisturbed (False when that cannot be read: measured as is)."""
    try:
        with runtime.services.db.session() as session:
            return measured_alone(session, job_id)
    except Exception:  # noqa: BLE001 - the claim meets (and reports) the same database
        log.warning("job %s: could not read how it is measured; measuring it as is", job_id, exc_info=True)
        return False


@dataclass
class JobRun:
    """One attempt at one job, from claim to its final transition."""

    runtime: WorkerRuntime
    job: Job
    # What the dispatcher decided (what to evict before the model loads); None: a message of a
    # release before the decision travelled with it.
    decision: DispatchDecision | None = None
    timings: dict[str, float] = field(default_factory=dict)
    cold: bool = False
    output: RunOutput | None = None
    validation: Validation | None = None
    generate_started_at: datetime | None = None
    generate_memory: dict[str, float] | None = None
    card_health: list[CardHealth] | None = None  # the group's cards when the last frame came
    phases: Phases | None = None  # the card time it used, as its report says
    undisturbed: bool = False  # it waited for this worker's earlier jobs to finish (wait_for_quiet)
    waited_ms: float = 0.0
    host: HostActivity | None = None  # what else ran on the host while it generated

    def __post_init__(self) -> None:
        self.owner = Owner(self.runtime.worker_id, self.job.attempts)
        self.services = self.runtime.services
        self.settings = self.services.settings
        self.spec: ModelSpec | None = self.services.catalog.get(self.job.model)
        self.clock0 = time.perf_counter()
        self.scratch = self.settings.resolved_scratch_dir() / f"{self.job.id}-{self.job.attempts}"
        self.timeout = (self.spec.timeout_seconds if self.spec else None) or self.settings.job_timeout_seconds
        self.heartbeat = Heartbeat(
            self.services.db,
            self.job.id,
            self.owner,
            lease_seconds=self.settings.lease_seconds,
            beat_seconds=self.settings.heartbeat_seconds,
            progress_interval=self.settings.progress_min_interval_seconds,
            deadline_seconds=self.timeout,
        )
        self.ctx: PipelineContext | None = None
        # The job's run as a span of the trace that submitted it (jobservice.tracing; off: a no-op).
        self.trace = JobSpan(
            self.job.trace_context,
            "job.run",
            **{
                "jobservice.job_id": str(self.job.id),
                "jobservice.model": self.job.model,
                "jobservice.attempt": self.job.attempts,
                "jobservice.worker": self.runtime.worker_id,
            },
        )
        self.written: list[str] = []  # object keys this run stored (deleted again if it loses the job)
        self.on_card = True  # until generation ends, the job holds its group's card
        self.member = self.runtime.member

    # --- the run -------------------------------------------------------------------------
    def execute(self) -> str:
        """Run to the end and record the outcome; never raises for a job-level failure.

        With a finisher (the worker's Celery tasks have one), everything after the last frame is
        handed to it and this returns ``"finishing"`` at once: the card takes the next job while
        this one is gated, stored and recorded (workers/finisher.py)."""
        self.heartbeat.start()
        self.member.clock.begin(self.job.id, self.job.model)
        handed_over = False
        outcome = "crashed"
        try:
            with self.trace.current():
                ended = self._guarded(self._generate)
                if ended is not None:
                    outcome = ended
                    return ended
                self.on_card = False
                self.member.released(self.job.id)  # the card takes its next job while this one finishes
                finisher = self.runtime.finisher
                if finisher is None:
                    outcome = self._guarded(self._after_generate) or "finished"
                    return outcome
                finisher.hand_over(self._finish_handed_over)
                handed_over = True
                return "finishing"
        finally:
            if not handed_over:
                self._clean_up()
                self.trace.end(outcome)

    def _finish_handed_over(self) -> str:
        outcome = "crashed"
        with job_log_context(self.job.id, self.job.attempts), self.trace.current():
            try:
                outcome = self._guarded(self._after_generate) or "finished"
                return outcome
            finally:
                self._clean_up()
                self.trace.end(outcome)

    def _guarded(self, step: Callable[[], str | None]) -> str | None:
        """Run ``step``; a job-level failure becomes the job's ending (its outcome is returned)."""
        try:
            return step()
        except LeaseLostError:
            return self._lease_lost()
        except JobCanceled as exc:
            return self._canceled(exc.reason)
        except AdapterError as exc:
            return self._failed(exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - a bug in a model or in us must still end the job
            log.exception("job %s: run crashed", self.job.id)
            return self._failed("internal_error", f"{type(exc).__name__}: {exc}")

    def _clean_up(self) -> None:
        self.heartbeat.stop()
        if self.ctx is not None:
            self.ctx.abort()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.member.ended(self.job.id, on_card=self.on_card)

    def _stage(self, stage: Stage, progress: float | None = None) -> None:
        self.heartbeat.update(stage=stage.value, progress=progress)

    def _lap(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self.timings[name] = round((now - since) * 1000, 3)
        return now

    def _generate(self) -> None:
        """Claim's aftermath up to the last frame: inputs, the resident model, generation."""
        if self.spec is None:
            raise AdapterError(
                "model_unavailable", f"Model '{self.job.model}' is not in this worker's catalog."
            )
        self.scratch.mkdir(parents=True, exist_ok=True)
        reset_peak_memory(self.runtime.device)
        self._start_log()
        t = time.perf_counter()
        inputs = self._fetch_inputs()
        t = self._lap("fetch_ms", t)

        self._stage(Stage.LOADING, 0.02)
        window = HostWindow(self.runtime.finisher, undisturbed=self.undisturbed, waited_ms=self.waited_ms)
        decided = self.decision.evict if self.decision is not None else None
        loaded, self.cold = self.runtime.resident.get(self.spec, job_id=self.job.id, evict=decided)
        if self.cold:
            self.timings["load_ms"] = round(loaded.load_ms, 3)
        t = time.perf_counter()

        self._stage(Stage.GENERATING, 0.05)
        self.ctx = PipelineContext(
            heartbeat=self.heartbeat,
            scratch=self.scratch,
            policy=self.spec.validation,
            hash_frames=self.job.batch_id is not None,  # batches compare outputs frame by frame
            on_loading=self._loading_in_run,
            preview=self._preview_publisher(),
        )
        self.generate_started_at = utcnow()
        self.ctx.check_cancel()
        self.output = loaded.adapter.run(loaded.handle, inputs, self.ctx)
        if self.ctx.preview is not None:
            self.ctx.preview.stop()  # the last frame is out: the validated video follows
        self.ctx.check_cancel()
        self._lap("generate_ms", t)
        self.host = window.close()
        self.card_health = self.runtime.read_cards()
        self.generate_memory = memory_report(self.runtime.device, self.card_health)

    def _preview_publisher(self) -> PreviewPublisher | None:
        """The run's preview publisher, when its model streams frames and previews are on; either
        way the row says at once whether a preview will come (``jobservice.jobs.previews``)."""
        assert self.spec is not None
        base = {"attempt": self.job.attempts, "try": previews.current_try(self.job)}
        interval = self.settings.preview_interval_seconds
        if not self.spec.previews or interval <= 0:
            message = previews.NO_PREVIEW_BACKEND if not self.spec.previews else previews.NO_PREVIEW_OFF
            self.heartbeat.update(preview={**base, "state": "none", "message": message})
            return None
        self.heartbeat.update(preview={**base, "state": "waiting"})
        return PreviewPublisher(
            store=self.services.store,
            key_of=self.key,
            announce=lambda record: self.heartbeat.update(preview=record),
            folder=self.scratch,
            interval=interval,
            record=base,
            on_stored=self.written.append,
        )

    @contextlib.contextmanager
    def _loading_in_run(self) -> Iterator[None]:
        """A load the adapter does inside its run (a resident child started for this job): the
        ledger shows it as loading, and it is the model's measured load."""
        assert self.spec is not None
        started = time.perf_counter()
        with self.member.clock.loading(self.job.id, self.spec.id):
            yield
        seconds = time.perf_counter() - started
        self.member.loaded(self.spec, seconds=seconds, job_id=self.job.id, reason="started by its run")

    def _after_generate(self) -> str:
        """From the last frame to the final transition: flush, gate, upload, report, record."""
        assert self.ctx is not None  # set by _generate
        video_path = self._finish_video()
        t = time.perf_counter()
        self._stage(Stage.UPLOADING, 0.97)
        self.ctx.check_cancel()  # still ours? a requeued job's new owner must not be overwritten
        output_key = self.key("output.mp4")
        store_output(self.services.store, output_key, video_path)  # retried; a full store fails the job
        self.written.append(output_key)
        self._lap("upload_ms", t)
        return self._record_outcome(output_key, video_path)

    def key(self, name: str) -> str:
        """Object key of one of this run's files: ``jobs/<id>/<name>`` for the first attempt,
        ``jobs/<id>/attempt-<n>/<name>`` for a retry, so a run that lost its lease can never
        overwrite what the job's current owner stores."""
        if self.job.attempts <= 1:
            return f"jobs/{self.job.id}/{name}"
        return f"jobs/{self.job.id}/attempt-{self.job.attempts}/{name}"

    def _fetch_inputs(self) -> JobInputs:
        files: dict[str, Path] = {}
        for name, key in (self.job.input_keys or {}).items():
            dest = self.scratch / "inputs" / Path(key).name
            dest.parent.mkdir(parents=True, exist_ok=True)
            files[name] = self.services.store.get_file(key, dest)
        return JobInputs(
            job_id=str(self.job.id),
            model=self.job.model,
            params=retries.run_params(self.job),  # the request's, with this try's seed
            files=files,
            scratch=self.scratch,
            meta={name: dict(meta) for name, meta in (self.job.input_meta or {}).items()},
        )

    def _finish_video(self) -> Path:
        assert self.output is not None and self.ctx is not None and self.spec is not None
        expect = expectation_of(self.job, self.spec, self.output, self.ctx)
        if self.output.video_path is None:
            t = time.perf_counter()
            encoded = self.ctx.finish_encoding()
            t = self._lap("encode_ms", t)
            self._stage(Stage.VALIDATING, 0.96)
            self.validation = validate_streamed(
                path=encoded.path, encode=encoded, expect=expect, policy=self.spec.validation
            )
            self._lap("validate_ms", t)
            return encoded.path
        t = time.perf_counter()
        self._stage(Stage.VALIDATING, 0.96)
        self.validation = validate_file(
            path=self.output.video_path, expect=expect, policy=self.spec.validation
        )
        self._lap("validate_ms", t)
        return self.output.video_path

    # --- endings -------------------------------------------------------------------------
    def _report(
        self, status: str, *, error: tuple[str, str] | None = None, video: Path | None = None
    ) -> RunReport:
        self.timings["total_ms"] = round((time.perf_counter() - self.clock0) * 1000, 3)
        if self.ctx is not None and self.ctx.cold_start is not None:
            self.cold = self.ctx.cold_start  # the adapter knows (a per-job script, a new resident)
        report = build_report(self, status=status, error=error, video_path=video)
        self.phases = self.member.clock.phases(self.job.id)
        report.usage = self._usage_of(self.phases)
        return report

    # --- the card time it used, and what it measured ------------------------------------------
    @property
    def cards(self) -> int:
        """The cards a job of this model holds (what it is charged for)."""
        return self.spec.cards if self.spec else 1

    def _usage_of(self, phases: Phases) -> dict[str, Any]:
        return {
            "card_seconds": round(phases.seconds * self.cards, 3),
            "phases": {
                "load": round(phases.load_s * self.cards, 3),
                "generate": round(phases.generate_s * self.cards, 3),
                "finish": round(phases.finish_s * self.cards, 3),
            },
            "cards": self.cards,
            "card_kind": self.runtime.device.kind,
            "group": self.runtime.node,
        }

    def _account(self, session: Session, outcome: str, phases: Phases | None = None) -> None:
        """Record the attempt's card time (charged, or the service's loss) and, when it generated,
        the speed it measured: in the final transition's own transaction."""
        record_attempt(
            session,
            job_id=self.job.id,
            attempt=self.job.attempts,
            tenant=self.job.tenant,
            model=self.job.model,
            group_id=self.runtime.node,
            card_kind=self.runtime.device.kind,
            cards=self.cards,
            phases=phases or self.phases or self.member.clock.phases(self.job.id),
            outcome=outcome,
            half_life_s=self.settings.fair_share_half_life_seconds,
        )
        generate_ms = self.timings.get("generate_ms")
        seconds = self.job.output_seconds or (self.output.media_duration_s if self.output else None)
        if outcome != "canceled" and self.output is not None and generate_ms and seconds:
            fleet_costs.record_generation(
                session,
                model=self.job.model,
                kind=self.runtime.device.kind,
                output_s=float(seconds),
                generate_s=generate_ms / 1000,
            )

    # --- the run's log: jobs/<id>/log.txt, kept on success and failure --------------------
    @property
    def log_path(self) -> Path:
        """Where this run's log is written (PipelineContext.job_log hands the same file to adapters)."""
        return self.scratch / "job.log"

    def _start_log(self) -> None:
        with self.log_path.open("a", encoding="utf-8") as out:
            out.write(
                f"{utcnow().isoformat()} job {self.job.id} model {self.job.model} "
                f"attempt {self.job.attempts} on {self.runtime.worker_id} ({self.runtime.device.label})\n"
            )

    def _store_log(self, outcome: str) -> None:
        """Store the run's log beside its report, before the final transition: a client that sees
        the job end and follows ``links.log`` at once must find it (a run that then turns out to
        have lost the job deletes it with its other files)."""
        if not self.log_path.exists():
            return
        key = self.key("log.txt")
        try:
            with self.log_path.open("a", encoding="utf-8") as out:
                out.write(f"{utcnow().isoformat()} finished: {outcome}\n")
            self.services.store.put_file(key, self.log_path, content_type="text/plain; charset=utf-8")
        except Exception:  # noqa: BLE001 - the job outcome matters more than its log
            log.exception("job %s: could not store the log", self.job.id)
            return
        self.written.append(key)

    def _store_report(self, report: RunReport) -> str | None:
        key = self.key("report.json")
        try:
            self.services.store.put_bytes(
                key, report.model_dump_json(indent=2).encode(), content_type="application/json"
            )
        except Exception:  # noqa: BLE001 - the job outcome matters more than its report
            log.exception("job %s: could not store the report", self.job.id)
            return None
        self.written.append(key)
        return key

    def _finish(self, transition: Callable[[Session], None], report: RunReport, target: JobStatus) -> bool:
        """Make the final transition, retried while the run holds its lease (workers/run/tail.py);
        False if the job is no longer ours."""
        self.heartbeat.finishing.set()
        self._store_log(
            report.status + (f" ({report.error.code}): {report.error.message}" if report.error else "")
        )
        written = write_final(
            self.services.db,
            transition,
            job_id=self.job.id,
            owner=self.owner,
            target=target,
            lease_held=self.heartbeat.lease_held,
        )
        if written == "lost":
            self._lease_lost()
        return written == "written"

    def _record_outcome(self, output_key: str, video_path: Path) -> str:
        assert self.validation is not None
        passed = self.validation.verdict == "passed"
        error = None if passed else ("validation_failed", failed_check_message(self.validation))
        report = self._report("succeeded" if passed else "failed", error=error, video=video_path)
        report_key = self._store_report(report)
        common: dict[str, Any] = {
            "owner": self.owner,
            "output_key": output_key,
            "report_key": report_key or "",
            "verdict": self.validation.verdict,
            "timings": summary_timings(report),
            "validation_summary": validation_summary(
                self.validation, warnings=self.ctx.extra.get("warnings") if self.ctx else None
            ),
            "cold_start": self.cold,
        }
        tried = None
        if not passed and retries.retries_left(self.job):
            tried = self._tried(report, error, report_key)
        outcome = "succeeded" if passed else "validation_failed"

        def transition(session: Session) -> None:
            nonlocal outcome
            if passed:
                mark_succeeded(session, self.job.id, **common)
            elif tried and retry_with_next_seed(session, self.job.id, owner=self.owner, tried=tried):
                outcome = "retrying"
            else:
                assert error is not None
                mark_failed(session, self.job.id, code=error[0], message=error[1], **common)
            self._account(session, "succeeded" if passed else "failed")

        target = JobStatus.SUCCEEDED if passed else JobStatus.QUEUED if tried else JobStatus.FAILED
        if not self._finish(transition, report, target):
            return "lease_lost"
        if outcome == "retrying":
            self.member.dispatch()  # the card may be idle by now: hand the next try out at once
        log.info(
            "job %s: %s in %.0f ms",
            self.job.id,
            {
                "succeeded": "succeeded",
                "validation_failed": "failed validation",
                "retrying": "failed validation; queued again with the next seed",
            }[outcome],
            report.timings["total_ms"],
        )
        return outcome

    def _tried(
        self, report: RunReport, error: tuple[str, str] | None, report_key: str | None
    ) -> dict[str, Any]:
        """What the job keeps of this try when the gate failed it and it may try again."""
        assert self.validation is not None
        return retries.try_record(
            self.job,
            verdict=self.validation.verdict,
            failed_checks=[c.name for c in self.validation.failed_checks],
            message=error[1] if error else "",
            output_key=self.key("output.mp4"),
            report_key=report_key,
            card_seconds=(report.usage or {}).get("card_seconds"),
            finished_at=utcnow().isoformat(),
        )

    def _failed(self, code: str, message: str) -> str:
        if self.ctx is not None:
            self.ctx.abort()
        report = self._report("failed", error=(code, message))
        report_key = self._store_report(report)

        def transition(session: Session) -> None:
            mark_failed(
                session,
                self.job.id,
                code=code,
                message=message,
                owner=self.owner,
                report_key=report_key,
                timings=summary_timings(report),
                cold_start=self.cold,
            )
            self._account(session, "failed")

        if not self._finish(transition, report, JobStatus.FAILED):
            return "lease_lost"
        log.warning("job %s: failed (%s): %s", self.job.id, code, message)
        return f"failed:{code}"

    def _canceled(self, reason: str) -> str:
        if reason == "timeout":
            return self._failed(
                "timeout", f"The job ran longer than its limit of {self.timeout:g} s and was stopped."
            )
        if self.ctx is not None:
            self.ctx.abort()
        report = self._report("canceled", error=("canceled", "Canceled at the user's request."))
        report_key = self._store_report(report)

        def transition(session: Session) -> None:
            mark_canceled(
                session, self.job.id, owner=self.owner, detail="canceled while running", report_key=report_key
            )
            self._account(session, "canceled")

        if not self._finish(transition, report, JobStatus.CANCELED):
            return "lease_lost"
        log.info("job %s: canceled while running", self.job.id)
        return "canceled"

    def _lease_lost(self) -> str:
        log.warning("job %s: this worker lost the job's lease; leaving it to its new owner", self.job.id)
        try:  # the card time it used is the service's loss, never the tenant's
            with self.services.db.session() as session:
                self._account(session, "lease_lost", self.member.clock.phases(self.job.id))
        except Exception:  # noqa: BLE001 - bookkeeping must not hold up the hand-over
            log.warning("job %s: could not record the lost attempt's card time", self.job.id, exc_info=True)
        for key in self.written:  # nothing points at them: the job's row names its owner's files
            try:
                self.services.store.delete(key)
            except Exception:  # noqa: BLE001 - an orphan is harmless; keep going
                log.warning("job %s: could not delete orphan %s", self.job.id, key)
        return "lease_lost"
