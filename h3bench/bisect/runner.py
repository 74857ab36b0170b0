"""The live bisection: verify, probes, stop, confirm, each a campaign of the project's own, and the log.

A bisection lives in one directory (``<evidence>/bisect-<spec>-<time>/``): ``bisect-log.jsonl``
(:mod:`h3bench.bisect.log`), ``specs/`` (each campaign's derived RunSpec, :mod:`h3bench.bisect.specs`) and
``bundles/`` (each campaign's sealed evidence bundle). Every campaign is run as ``h3bench run`` runs one
(:mod:`h3bench.bisect.campaigns`). A probe's blocks run one AB/BA pair at a time and the probe test
(:class:`h3bench.bisect.probe.ProbeTest`) decides after each pair whether another is needed; the matched
pairs' gates are judged after each pair too, so a probe whose output breaks stops there and is recorded as
broken, never as slow. After each claim the search goes on into the segments of the range it leaves
(:mod:`h3bench.bisect.segments`), so that every change is named.

What a campaign showed is read back from its sealed bundle (:func:`h3bench.bisect.observe.observe`),
whether this process ran it or another host did (``--take``), so a resume and a fan-in reach what the run
reached. A commit whose server fails to start or serve (or whose output breaks, in a speed bisection) is
skipped with its reason; a block of the good engine that fails makes the probe invalid, and a commit
invalid twice is skipped too.

Several hosts (``--next N`` / ``--run probe:K`` / ``--take``): ``--next`` chooses a round of N probes at
once and records it, each host runs one with ``--run`` into its own sealed bundle, and ``--take`` verifies
the bundles and appends what they showed. One host runs the same steps in one process. The log's lines and
summary are :mod:`h3bench.bisect.summary`'s."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from h3bench.bisect import segments
from h3bench.bisect.campaigns import Options, run_campaign
from h3bench.bisect.choice import ProbeCosts
from h3bench.bisect.log import LOG_NAME, BisectionLog
from h3bench.bisect.observe import Observation, observe_bundle, pair_log_ratios, verify_fields
from h3bench.bisect.probe import DECISIONS, ProbeTest, between_flags, quality_log_lr
from h3bench.bisect.search import SearchRule, SearchState, futile_at, threshold_after
from h3bench.bisect.simulate import campaign_bounds
from h3bench.bisect.specs import Kind, campaign_data, duration_of, engine, table_of, write_spec
from h3bench.bisect.summary import record_line, summary_lines
from h3bench.course.design import budget_of
from h3bench.errors import UsageError
from h3bench.evidence import BundleReader
from h3bench.evidence.files import now
from h3bench.outcome import Outcome
from h3bench.runspec import BASELINE, RunSpec, load_runspec
from h3bench.session.results import Results
from h3bench.stats import sequential

__all__ = ["Bisection", "Options"]

INVALID_LIMIT = 2  # a commit whose probe was invalid this often (the good engine's blocks failed) is skipped


@dataclass
class Bisection:
    """One bisection's directory, log and state; see the module docstring."""

    spec: RunSpec
    spec_path: Path
    directory: Path
    options: Options = field(default_factory=Options)
    say: Callable[[str], None] = field(default=lambda line: print(line, flush=True))

    def __post_init__(self) -> None:
        self.table = table_of(self.spec)
        self.log = BisectionLog(self.directory / LOG_NAME)
        self.test = ProbeTest(self.table.level, self.table.min_pairs, self.table.max_pairs)
        budget = self.table.budget_device_h
        self.rule = SearchRule(self.table.posterior, math.inf if budget is None else budget * 3600.0)

    # -- opening ---------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, spec_path: Path, options: Options, say: Callable[[str], None] | None = None) -> Bisection:
        """A new bisection under the evidence root, or the one ``options.resume`` names (of the same spec)."""
        spec = load_runspec(spec_path)
        size, source = segments.asked(table_of(spec), [], options.size)
        if options.resume is not None:
            directory = options.resume
            records = BisectionLog(directory / LOG_NAME).read()
            if not records:
                raise UsageError(f"{directory}: no bisection log ({LOG_NAME}) to resume")
            if records[0].get("spec_id") != spec.spec_id:
                raise UsageError(f"{directory} is a bisection of another spec ({str(records[0].get('spec_id'))[:12]}…),"
                                 f" not of {spec_path} ({spec.spec_id[:12]}…)")
            segments.asked(table_of(spec), records, options.size)  # a resume looks for the size it started with
        else:
            stamp = now().replace(":", "").replace("-", "")
            directory = options.evidence_root / f"bisect-{spec.name}-{spec.spec_id[:12]}-{stamp}"
            if directory.exists():
                raise UsageError(f"{directory} exists: give --resume {directory} to continue it")
        made = cls(spec, spec_path, directory, options)
        if say is not None:
            made.say = say
        if options.resume is None:
            made.log.append("start", spec_id=spec.spec_id, spec_name=spec.name, spec_file=str(spec_path), size=size,
                            size_from=source, on=made.on, commits=[e.commit for e in (made.table.good, *made.table.range)],
                            notes=[e.note for e in (made.table.good, *made.table.range)],
                            posterior=made.rule.posterior, budget_device_h=made.table.budget_device_h,
                            test=made.test.describe())
        return made

    # -- the state, from the log ---------------------------------------------------------------------------

    @property
    def n(self) -> int:
        return len(self.table.range)

    def records(self, event: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.log.read() if event is None or r["event"] == event]

    @property
    def on(self) -> str:
        return self.options.on or self.table.on

    def quality_mode(self) -> bool:
        return self.on == "quality"

    def state(self, more: Sequence[dict[str, Any]] = ()) -> SearchState:
        """The search as the log's records leave it (and ``more``, a record about to be appended)."""
        state = SearchState.start(self.n, [e.weight for e in self.table.range])
        records = [*self.log.read(), *more]
        state.lo, state.hi = segments.current(records, self.n)[:2]
        invalid: dict[int, int] = {}
        gates = np.zeros(self.n)
        for record in records:
            if record["event"] not in ("verify", "probe"):
                continue
            j = int(record["position"]) - 1
            device = float(record["device_s"])
            if record["status"] == "measured" or (record["event"] == "verify" and self.quality_mode()):
                if self.quality_mode():
                    gates[j] += float(record["log_lr"])
                    state.spent_device_s += device
                    state.pulled.add(j)
                    state.probes += 1
                else:
                    state.take(j, record["log_ratios"], device)
            elif record["status"] == "invalid":
                invalid[j] = invalid.get(j, 0) + 1
                state.spent_device_s += device
                if invalid[j] >= INVALID_LIMIT:
                    state.skipped[j] = f"invalid {invalid[j]} times: {record['reason']}"
            else:
                state.skip(j, f"{record['status']}: {record['reason']}", device)
        if self.quality_mode():
            # The gates' ratios are the whole likelihood (no pair of log ratios is kept): each counts for every
            # culprit at or before its commit, so the prior takes their sums from each k on.
            state.prior = state.prior + np.cumsum(gates[::-1])[::-1]
        return state

    def costs(self, state: SearchState) -> ProbeCosts:
        """A probe's seconds from the hints: a good and a commit block per pair, the image the first time."""
        spec = self.spec
        hints = spec.hints
        key = f"{duration_of(spec):g}"
        request = hints.e2e_s.get(BASELINE, {}).get(key, 1.0) if hints is not None else 1.0
        start = hints.of("startup_s", BASELINE) if hints is not None else 0.0
        stop = hints.of("shutdown_s", BASELINE) if hints is not None else 0.0
        block = start + stop + budget_of(spec).requests * request
        image = np.where(np.isin(np.arange(self.n), list(state.pulled)), 0.0, self.table.image_s)
        return ProbeCosts(block, np.full(self.n, block), image)

    # -- running one campaign (h3bench.bisect.campaigns) ------------------------------------------------------

    def _spec_file(self, kind: Kind, control: int, candidate: int, number: int) -> Path:
        data = campaign_data(self.spec, kind, control, candidate, number=number)
        header = (f"{kind} of the bisection {self.directory.name}, derived from {self.spec_path} "
                  f"(spec id {self.spec.spec_id}); `h3bench run --runspec THIS` repeats it")
        return write_spec(self.directory / "specs" / f"{data['name']}.toml", data, header)

    def run_campaign(self, kind: Kind, control: int, candidate: int, number: int = 0, *,
                     prior_state: SearchState | None = None) -> Path:
        """Run (or resume) one campaign into a sealed bundle; its path. KeyboardInterrupt after sealing it."""
        done: Callable[[Results, str, int], bool]
        if kind == "probe" and segments.is_top_up(records := self.log.read(), number):  # a segment's end
            base, size = self.state().evidence, segments.size_of(self.table, records)
            done = lambda results, name, pairs: pairs >= self.test.max_pairs or segments.top_up_settled(  # noqa: E731
                records, number, base.add(candidate - 1, np.asarray(pair_log_ratios(results, results.spec, name))), size)
        elif kind == "probe":
            assert prior_state is not None
            done = self._probe_done(candidate - 1, prior_state)
        elif kind == "verify":
            done = lambda results, name, pairs: self._campaign_done(results, name, pairs) or bool(  # noqa: E731
                not self.quality_mode() and self._futility(pair_log_ratios(results, results.spec, name)))
        else:
            done = self._campaign_done
        return run_campaign(self._spec_file(kind, control, candidate, number), self.directory / "bundles",
                            self.options, done, self.say)

    def _campaign_done(self, results: Results, name: str, pairs: int) -> bool:
        """The verify's or the confirm's own look stopped it (a quality bisection: its first clean pair does)."""
        found = results.decision(duration_of(results.spec), name)
        return self.quality_mode() or (found is not None and found.stop)

    def _probe_done(self, commit: int, state: SearchState) -> Callable[[Results, str, int], bool]:
        """The probe's test: stop once it is clear (the gates' ratio in a quality bisection)."""
        def done(results: Results, name: str, pairs: int) -> bool:
            if pairs < self.test.min_pairs:
                return False
            if self.quality_mode():
                verify = self.records("verify")[-1]
                outcomes = results.judge.pairs_of(name, duration_of(results.spec))
                failing = sum(1 for p in outcomes if p.outcome is Outcome.FAIL)
                log_lr = quality_log_lr(failing, len(outcomes), int(verify["failing"]), int(verify["matched"]))
                return abs(log_lr) >= self.test.threshold or pairs >= self.test.max_pairs
            x = pair_log_ratios(results, results.spec, name)
            found = self.test.run(state.segment_evidence, state.segment_prior, commit, np.asarray(x))
            self.say(f"  probe of {engine(self.spec, commit + 1).commit}: {pairs} pair(s), log LR "
                     f"{float(found.log_lr):+.2f} ({DECISIONS[int(found.decision)]})")
            return bool(found.stopped)

        return done

    # -- what a campaign showed, into the log ------------------------------------------------------------

    def take(self, kind: Kind, position: int, number: int, bundle: Path) -> dict[str, Any] | None:
        """Append what a sealed campaign bundle showed; None when its seal is already in the log."""
        spec, seen = observe_bundle(bundle, self.options.lpips_dir)
        if self.log.has_seal(seen.final_sha256):
            return None
        control = self._parent(number) if kind == "confirm" else 0
        expected = load_runspec(self._spec_file(kind, control, position, number))
        if spec.spec_id != expected.spec_id:
            raise UsageError(f"{bundle} is a campaign of {spec.name}, not the bisection's {kind} {number} "
                             f"({expected.name})")
        where = str(bundle.relative_to(self.directory)) if bundle.is_relative_to(self.directory) else str(bundle)
        common = {"position": position, "commit": engine(self.spec, position).commit, "bundle": where,
                  "final_sha256": seen.final_sha256, "spec_id": seen.spec_id, "status": seen.status,
                  "reason": seen.reason, "pairs": len(seen.log_ratios), "log_ratios": list(seen.log_ratios),
                  "failing": seen.failing, "matched": seen.matched, "device_s": seen.device_s}
        if kind == "verify":
            return self._take_verify(seen, common)
        if kind == "confirm":
            return self._take_confirm(seen, {**common, "number": number})
        return self._take_probe(seen, common, number)

    def _take_verify(self, seen: Observation, common: dict[str, Any]) -> dict[str, Any]:
        futile = "" if self.quality_mode() or seen.status != "measured" else self._futility(seen.log_ratios)
        return self._append("verify", {**common, **verify_fields(seen, self.quality_mode(), futile)})

    def _futility(self, log_ratios: Sequence[float]) -> str:
        """Why the verify's futility stop ends it after these pairs (:func:`h3bench.bisect.search.futile_at`);
        empty while a change of the size asked is still within its reach, or when no size was asked."""
        size, source = segments.asked(self.table, self.log.read())
        if size is None:
            return ""
        bounds = campaign_bounds(self.spec, "verify", 0, self.n)
        at, upper = (float(v) for v in futile_at(np.asarray(log_ratios, dtype=float), bounds, math.log(size)))
        return "" if not at else (f"INCONCLUSIVE: futility at {at:.0f} pairs: the bad engine is at most {upper:.4f} "
                                  f"times as slow as the good one, below the size asked ({size:g}, {source}), so no "
                                  "later look can show a change that large")

    def _append(self, event: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Append a verify or probe record with the posterior after it and the device time spent by then."""
        after = self.state([{"event": event, **fields}])
        return self.log.append(event, **fields, posterior=_rounded(after.probs),
                               spent_device_s=after.spent_device_s)

    def _take_probe(self, seen: Observation, common: dict[str, Any], number: int) -> dict[str, Any]:
        j = int(common["position"]) - 1
        before = self.state()
        decision, log_lr, between = "none", 0.0, False
        if self.quality_mode() and seen.status in ("measured", "broken"):
            verify = self.records("verify")[-1]
            log_lr = quality_log_lr(seen.failing, seen.matched, int(verify["failing"]), int(verify["matched"]))
            common["status"] = "measured"
            decision = DECISIONS[1 if log_lr >= self.test.threshold else -1 if log_lr <= -self.test.threshold else 0]
        elif seen.status == "measured" and seen.log_ratios:
            x = np.asarray(seen.log_ratios)
            evidence, prior = before.segment_evidence, before.segment_prior
            found = self.test.run(evidence, prior, j, x)
            log_lr = float(self.test.log_lr_paths(evidence, prior, j, x)[-1])
            decision = DECISIONS[int(found.decision)]
            step, _ = evidence.step(before.log_post)
            # Against the good engine's level: the whole range's search only (a segment's base has its own).
            between = before.lo < 0 and bool(between_flags(x, len(x), float(step), found.decision))
        elif seen.status == "measured":
            common["status"], common["reason"] = "invalid", "no complete AB/BA pair was measured"
        return self._append("probe", {"number": number, **common, "decision": decision, "log_lr": log_lr,
                                      "between": between})

    def _take_confirm(self, seen: Observation, common: dict[str, Any]) -> dict[str, Any]:
        lo, hi, direction = segments.current(self.log.read(), self.n)
        if self.quality_mode():
            claim = seen.quality is Outcome.FAIL
        else:
            # The change the segment's ends show: slower, or faster (a later commit that undoes part of a step).
            shown = sequential.FAILED if direction > 0 else sequential.PASSED
            claim = seen.speed == sequential.REASONS[shown] and seen.status == "measured"
        record = self.log.append("confirm", **common, claim=claim, speed=seen.speed, interval=seen.interval,
                                 speed_reasons=list(seen.reasons), quality=str(seen.quality) if seen.quality else None)
        if claim and not self.quality_mode():
            stop = self.records("stop")[-1]
            self.log.append("claimed", number=common["number"], lo=lo, hi=hi, first=int(stop["named"][0]) - 1,
                            last=int(stop["named"][1]) - 1)
        return record

    def _open_segments(self) -> list[tuple[Kind, int, int]]:
        """After a claim: the probes that measure its segments' ends more, when some are due; else the segments
        decided and recorded (:func:`h3bench.bisect.segments.after_claim`), and nothing to run."""
        records = self.log.read()
        found = segments.after_claim(records, self.state().evidence, segments.size_of(self.table, records))
        if found is not None and found[1]:
            return self._round(records, [end for end, _, _ in found[1]], self.state().spent_device_s,
                               top_up=found[0], segments=[[a, b] for _, a, b in found[1]])
        if found is not None:
            self.log.append("segments", claim=found[0], segments=found[2])
        return []

    def _round(self, records: list[dict[str, Any]], chosen: list[int], spent_device_s: float, **more: Any
               ) -> list[tuple[Kind, int, int]]:
        """Record a round of probes of the ``chosen`` commits (culprit indices), numbered on from the log's."""
        number = sum(len(r["probes"]) for r in records if r["event"] == "round") + 1
        probes = [{"number": number + i, "position": j + 1, "commit": engine(self.spec, j + 1).commit}
                  for i, j in enumerate(chosen)]
        self.log.append("round", probes=probes, spent_device_s=spent_device_s, **more)
        return [("probe", int(j) + 1, number + i) for i, j in enumerate(chosen)]

    # -- the course -------------------------------------------------------------------------------------------

    def pending(self) -> list[tuple[Kind, int, int]]:
        """The campaigns chosen but not taken yet: (kind, position, number)."""
        records = self.log.read()
        done = {(r["event"], r.get("number", 0), int(r["position"])) for r in records
                if r["event"] in ("verify", "probe", "confirm")}
        chosen: list[tuple[Kind, int, int]] = []
        for r in records:
            if r["event"] == "round":
                chosen += [("probe", int(p["position"]), int(p["number"])) for p in r["probes"]]
            elif r["event"] == "confirming":
                chosen.append(("confirm", int(r["position"]), int(r["number"])))
        if not any(r["event"] == "verify" for r in records):
            chosen.insert(0, ("verify", self.n, 0))
        return [(kind, pos, num) for kind, pos, num in chosen if (kind, num, pos) not in done]

    def next_round(self, hosts: int = 1) -> list[tuple[Kind, int, int]]:
        """Choose what runs next (and record it): the verify, a round of probes, the confirm, or nothing.

        A confirm that does not confirm sends the search back to its probes, at a higher posterior
        (:func:`h3bench.bisect.search.threshold_after`), up to :data:`~h3bench.bisect.search.CONFIRMS` confirms.
        """
        left = self.pending() or self._open_segments()
        if left:
            return left
        records = self.log.read()
        verify = [r for r in records if r["event"] == "verify"][-1]
        todo, done, start = segments.course(records, self.n)
        if not verify["reproduced"] or any(r["event"] == "end" for r in records) or done >= len(todo):
            return []
        section = [r for r in records if int(r.get("seq", 0)) > start]  # the current segment's records
        confirms = [r for r in section if r["event"] == "confirm"]
        since = section[max((section.index(r) + 1 for r in confirms), default=0):]  # after a failed confirm
        threshold = threshold_after(self.rule.posterior, len(confirms))
        if not any(r["event"] == "stop" for r in since):
            state = self.state()
            state.segment_probed = sum(1 for r in section if r["event"] == "probe")
            rule = dataclasses.replace(self.rule, posterior=threshold)
            chosen = state.next_probes(self.test, self.costs(state), hosts)
            reason = state.stop_reason(rule, chosen[0] if chosen else -1, segments.size_of(self.table, records) / 2)
            if reason is None:  # a round of probes; else the search stops
                return self._round(records, chosen, state.spent_device_s)
            first, last, mass = state.named(threshold)
            self.log.append("stop", reason=reason, posterior=threshold,
                            named=[first + 1, last + 1] if first >= 0 else None, mass=mass,
                            top=[{"position": k + 1, "commit": engine(self.spec, k + 1).commit, "mass": m}
                                 for k, m in state.top(3)],
                            skipped={str(k + 1): why for k, why in state.skipped.items()},
                            spent_device_s=state.spent_device_s)
        stop = [r for r in self.log.read() if r["event"] == "stop"][-1]
        if stop["named"] is None:
            return self.next_round(hosts)  # the next segment, if any
        number = len(self.records("confirm")) + 1
        self.log.append("confirming", number=number, position=int(stop["named"][1]), parent=int(stop["named"][0]) - 1)
        return [("confirm", int(stop["named"][1]), number)]

    def _parent(self, number: int) -> int:
        """The control of the ``number``-th confirm: the named group's parent."""
        return int(next(r["parent"] for r in self.records("confirming") if int(r["number"]) == number))

    def find_step(self, kind: Kind, number: int) -> tuple[Kind, int, int]:
        """A chosen step not taken yet (``--run``): the verify, the K-th probe, or the confirm."""
        for step in self.pending():
            if step[0] == kind and (kind != "probe" or step[2] == number):
                return step
        raise UsageError(f"{self.directory}: no {kind}{f' {number}' if kind == 'probe' else ''} is waiting to run "
                         "(choose it with --next, or it is already taken)")

    def take_bundle(self, bundle: Path) -> dict[str, Any] | None:
        """Append what a waiting step's sealed bundle showed (``--take``), the step found by the bundle's spec."""
        spec_id = BundleReader.open(bundle).spec_id
        for kind, position, number in self.pending():
            control = self._parent(number) if kind == "confirm" else 0
            if load_runspec(self._spec_file(kind, control, position, number)).spec_id == spec_id:
                return self.take(kind, position, number, bundle)
        done = [r for r in self.log.read() if r.get("spec_id") == spec_id]
        if done:
            return None
        raise UsageError(f"{bundle} is no waiting step of the bisection in {self.directory}")

    def run_step(self, kind: Kind, position: int, number: int) -> Path:
        """Run one chosen campaign on this host; its sealed bundle."""
        if kind == "verify":
            return self.run_campaign("verify", 0, position)
        if kind == "confirm":
            return self.run_campaign("confirm", self._parent(number), position, number)
        return self.run_campaign("probe", 0, position, number, prior_state=self.state())

    def run(self) -> int:
        """The whole search on this host; the exit code (0: a confirmed culprit, 3: no claim)."""
        while True:
            steps = self.next_round(1)
            if not steps:
                break
            for kind, position, number in steps:
                what = f"{kind} {number}" if kind == "probe" else kind
                self.say(f"h3bench bisect: {what}: {engine(self.spec, position).commit} ...")
                bundle = self.run_step(kind, position, number)
                record = self.take(kind, position, number, bundle)
                if record is not None:
                    self.say(record_line(record))
        return self.finish()

    def finish(self) -> int:
        """Enter every confirmed claim into the ledger, write the end record once; the exit code."""
        records = self.log.read()
        claims = [r for r in records if r["event"] == "confirm" and r["claim"]]
        if claims and self.options.ledger is not None and not any(r["event"] == "ledger" for r in records):
            from h3bench.ledger.append import add_bundle

            entries = [e["hash"] for r in claims
                       for e in add_bundle(self.directory / r["bundle"], self.options.ledger).entries]
            self.log.append("ledger", ledger=str(self.options.ledger), entries=entries)
        if not any(r["event"] == "end" for r in self.log.read()):
            self.log.append("end", outcome=self.outcome())
        for line in summary_lines(self.spec, self.table, self.directory, self.log.read(), self.outcome()):
            self.say(line)
        return 0 if claims else 3

    def claims(self) -> list[list[str]]:
        """Each confirmed claim's commits (one, or a group no probe could split), in the order they were found."""
        return [[engine(self.spec, p).commit for p in range(a + 1, b + 2)] for a, b in segments.claims(self.log.read())]

    def claimed(self) -> list[str]:
        """The commits of every confirmed claim; empty without a claim."""
        return [c for claim in self.claims() for c in claim]

    def outcome(self) -> str:
        records = self.log.read()
        verify = [r for r in records if r["event"] == "verify"]
        if verify and not verify[-1]["reproduced"]:
            return verify[-1]["why"] if verify[-1].get("futile") else "not reproduced"
        found = len(self.claims())
        if found:
            return "culprit confirmed" if found == 1 else f"{found} changes confirmed"
        if any(r["event"] == "confirm" for r in records):
            return "not confirmed"
        stop = [r for r in records if r["event"] == "stop"]
        return f"no culprit named ({stop[-1]['reason']})" if stop else "unfinished"


def _rounded(probs: np.ndarray) -> list[float]:
    return [round(float(p), 6) for p in probs]
