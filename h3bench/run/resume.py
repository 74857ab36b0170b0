"""Resuming an interrupted campaign: what the killed run left behind is stopped, the rest runs again.

``pytest --resume BUNDLE`` (and ``h3bench run --resume BUNDLE``) continues a
run that Ctrl-C, a signal, SIGKILL, an OOM kill, a full disk or a host reboot ended:

0. A bundle whose run completed has nothing to resume: that is said, and
   nothing is written (:class:`~h3bench.errors.NothingToResume`). A bundle
   that another live process writes (a run, or another resume) is refused at
   once with that process's pid (:class:`~h3bench.evidence.lock.WriterLock`,
   taken before anything is stopped and held until the bundle is sealed), so
   two campaigns never write one bundle, and a resume never stops the servers
   of a run that is still going.
1. The spec must be the bundle's: a different spec, or an edited one (its id
   changes with any value), is refused with the reason.
2. Server processes that the interrupted run left are found and stopped
   before anything else starts: every process whose environment carries one
   of the bundle's run ids (``H3BENCH_CAMPAIGN_ID``, which every server of a
   run inherits), and every process holding the port of a server that
   ``servers.jsonl`` says was launched and whose lifecycle never ended —
   stopped only when it carries that server's marker, and named otherwise.
3. The bundle stays append-only: a last segment that never closed (a killed
   run) is sealed with the hashes its files have now, and the resume writes a
   new segment ``resume-<n>/`` (:meth:`h3bench.evidence.Bundle.resume`), whose
   ``resume.json`` names what was stopped and every incomplete attempt.
4. A shard of a campaign over several hosts stays that shard: the shard and
   round come from the bundle's shard record (:func:`resumed_shard`), and a
   ``--shard`` or ``--looks`` that is not the bundle's is refused before
   anything runs, so the resumed bundle still pools with the other shards.
5. Blocks that finished are kept and not run again; a block that was
   interrupted runs again in full (a block needs a fresh server). The partial
   samples of its interrupted attempt stay in the bundle, marked incomplete
   in ``resume.json``, and no statistic uses them
   (:func:`h3bench.run.records.load_results`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from h3bench.course.shards import Shard, ShardRun
from h3bench.errors import EvidenceError, NothingToResume, RunSpecError, UsageError
from h3bench.evidence import Bundle, BundleReader
from h3bench.evidence.lock import WriterLock
from h3bench.evidence.verify import final_sha256
from h3bench.host.environment import environment
from h3bench.run.records import incomplete_attempts
from h3bench.runspec import RunSpec
from h3bench.server.ports import port_holder
from h3bench.server.proctree import CAMPAIGN_ID_ENV, SERVER_ID_ENV, marked_processes, stop_processes

__all__ = ["Resumed", "resume_bundle", "resumed_shard"]

_SWEEP_BUDGET_S = 10.0


@dataclass(frozen=True)
class Resumed:
    """A bundle opened for its next segment, and what the resume did first."""

    bundle: Bundle
    stopped: tuple[str, ...]  # processes of the interrupted run that were still there
    left_alone: tuple[str, ...]  # port holders that are not ours
    incomplete: tuple[dict[str, Any], ...]  # attempts that did not finish

    def log_lines(self) -> list[str]:
        lines = [f"h3bench resume: {self.bundle.path}, segment {self.bundle.segment.rstrip('/')}"]
        lines += [f"h3bench resume: stopped {what}" for what in self.stopped] or ["h3bench resume: no server was left"]
        lines += [f"h3bench resume: left alone {what}" for what in self.left_alone]
        lines += [f"h3bench resume: incomplete attempt of {a['block']} ({a['samples']} samples, not used)"
                  for a in self.incomplete]
        return lines


def _refuse_other_spec(bundle: Bundle, spec: RunSpec) -> None:
    stored = bundle.manifest.spec
    if spec.spec_id == bundle.spec_id:
        return
    if isinstance(stored, dict) and stored.get("name") == spec.name:
        why = (f"the RunSpec {spec.name!r} was edited since the run "
               f"(id {spec.spec_id[:12]}…, the bundle's {bundle.spec_id[:12]}…)")
    else:
        why = f"the bundle was written under another RunSpec ({stored.get('name')!r}, id {bundle.spec_id[:12]}…)"
    raise RunSpecError(f"cannot resume {bundle.path}: {why}; a resume runs under the same frozen spec",
                       field_path="spec_id")


def resumed_shard(path: Path, shard: Shard | None, looks: Path | None) -> Shard | None:
    """The shard the bundle at ``path`` ran, from its shard record; None for a bundle run without ``--shard``.

    Raises UsageError, before anything runs, for a ``--shard`` that is not
    the bundle's, and for a ``--looks`` that is not the look file its round
    ran (a round after the first needs it: the record keeps its SHA-256, and
    the next blocks are read from it); EvidenceError for a malformed record.
    """
    manifest = Path(path, "manifest.json")
    if not manifest.is_file():
        return shard  # resume_bundle names what is wrong with it
    where = str(manifest)
    record = ShardRun.of(BundleReader.open(path).manifest, where=where)
    if record is None:
        if shard is not None:
            raise UsageError(f"--shard {shard.label}: {path} ran without --shard, so its resume is not a shard; "
                             "resume it without --shard")
        return None
    if shard is not None and shard != record.shard:
        raise UsageError(f"--shard {shard.label}: {path} is {record.label} of a campaign over several hosts, and "
                         f"a resume runs that shard's blocks only; resume it without --shard (or with --shard "
                         f"{record.shard.label})")
    ran_with = record.looks_sha256
    if looks is None and record.round > 1:
        raise UsageError(f"--resume {path}: it is {record.label}, which ran the look file with SHA-256 "
                         f"{ran_with}; give that file with --looks FILE")
    if looks is not None:
        try:
            given = hashlib.sha256(looks.read_bytes()).hexdigest()
        except OSError as exc:
            raise UsageError(f"--looks {looks}: cannot be read ({exc.strerror or exc})") from None
        if given != ran_with:
            ran = f"ran the look file with SHA-256 {ran_with}" if ran_with else "is round 1 and ran no look file"
            raise UsageError(f"--looks {looks}: its SHA-256 is {given}, but {path} ({record.label}) {ran}; a "
                             "resume runs the round the bundle began")
    return record.shard


def _sweep(bundle: Bundle) -> tuple[list[str], list[str]]:
    """Stop the interrupted run's servers: by run id, and by the ports of servers that never ended."""
    ours = {p.pid: p for session in bundle.sessions() for p in marked_processes(CAMPAIGN_ID_ENV, session)}
    left_alone = []
    for attempt in incomplete_attempts(bundle):
        server = next((s for s in bundle.servers() if s.get("pid") == attempt["pid"]), {})
        holder = port_holder(attempt["port"]) if attempt.get("port") else None
        if holder is None:
            continue
        pid = int(holder.split()[1])
        try:
            marker = psutil.Process(pid).environ().get(SERVER_ID_ENV)
        except psutil.Error:
            marker = None
        if marker is not None and marker == server.get("server_id"):
            ours.setdefault(pid, psutil.Process(pid))
        elif pid not in ours:
            left_alone.append(f"{holder} on port {attempt['port']} (not a server of this bundle)")
    return stop_processes(list(ours.values()), _SWEEP_BUDGET_S), left_alone


def resume_bundle(path: Path, spec: RunSpec, session: str) -> Resumed:
    """Check the spec, stop what the interrupted run left, and open the bundle's next segment.

    Raises
    ------
    NothingToResume
        The bundle's run completed; nothing was written.
    BundleBusyError
        Another live process writes the bundle; nothing was stopped or written.
    """
    if not Path(path, "manifest.json").is_file():
        raise EvidenceError(f"{path}: not an evidence bundle to resume (no manifest.json)", path=str(path))
    bundle = Bundle.open(path)
    final = bundle.final()
    if final is not None and final.get("outcome") == "completed":
        raise NothingToResume(f"{path}: nothing to resume: its run completed at {final.get('ended_at')} "
                              f"(final.json SHA-256 {final_sha256(path)}); nothing was run or written", path=str(path))
    lock = WriterLock.acquire(bundle.path, session)
    try:
        _refuse_other_spec(bundle, spec)
        stopped, left_alone = _sweep(bundle)
        incomplete = incomplete_attempts(bundle)
        record = {"environment": environment(), "session": session, "spec_id": spec.spec_id, "stopped": stopped,
                  "left_alone": left_alone, "incomplete": incomplete}
        resumed = Bundle.resume(path, record, lock=lock)
    except BaseException:
        lock.release()
        raise
    return Resumed(resumed, tuple(stopped), tuple(left_alone), tuple(incomplete))
