"""The trace of a long run (issue 21): memory, checkpoint time and queries, before and after.

A tiny model (a linear layer on 16 x 8 inputs, SGD, one torch thread) trains through the
Engine with the trainer's event sequence (13 events a step, epoch events every 1,000 steps)
and 5 algorithms, each matching one event of the step (so 60 of every 65 'match' answers are
no), trace 'all'. The Engine is driven directly, not through Trainer.fit: 200,000 fits' steps
take too long on this 2-core shared machine; the trace sees the same events and calls.

Both trees run in one invocation: this tree, and the tree before (``--before``, default
/tmp/before, run in a subprocess with PYTHONPATH pointing at it). Each run stops at the
checkpoint marks and times what a checkpoint does with the trace (before: every frame as
parquet bytes; after: the spilled chunks by reference and the rows in memory as bytes) plus
``torch.save`` of it; it measures the trace's memory (rows held in Python, deep size, plus the
arrow memory) and a query ('calls of SelectiveBackprop between batches 1,000 and 2,000',
'events of epoch 3'; before: built from the whole frames). The tree before holds every row in
memory, so it runs fewer steps (default 20,000) and is extrapolated linearly. Writes
benchmarks/results/trace_scale.json.

``--child --steps N`` runs the tree on PYTHONPATH alone and prints its JSON: at each mark
``trace_memory_bytes`` (the rows in memory, deep size: the columns' arrays and lists, or where a
tree keeps records, their tuples and numbers; plus arrow's allocated memory and the chunk list),
``rss_bytes`` (the process's, a check), the checkpoint's time and size; then ``us_per_step``,
``query_s`` and ``record_ns`` (the trace's own cost of recording a call and an event).

    python benchmarks/trace_scale.py [--steps 200000] [--before-steps 20000] [--before /tmp/before]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from composer_lab.core import Algorithm, Engine, Event, State, Trace

STEP = (Event.BEFORE_DATALOADER, Event.AFTER_DATALOADER, Event.BATCH_START, Event.BEFORE_TRAIN_BATCH,
        Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BEFORE_BACKWARD,
        Event.AFTER_BACKWARD, Event.AFTER_TRAIN_BATCH, Event.BATCH_END, Event.BATCH_CHECKPOINT)
EPOCH_STEPS = 1000


class Stub(Algorithm):
    """Matches one event of every step and does nothing: the trace's cost, not the algorithm's."""

    event = Event.INIT

    def match(self, event, state):
        return event is self.event

    def apply(self, event, state, logger):
        return None


def stub(name: str, event: Event) -> Stub:
    return type(name, (Stub,), {"event": event})()


def algorithms() -> list:
    return [stub("SelectiveBackprop", Event.AFTER_DATALOADER), stub("LabelSmoothing", Event.BEFORE_LOSS),
            stub("GradientClipping", Event.AFTER_BACKWARD), stub("LayerFreezing", Event.AFTER_TRAIN_BATCH),
            stub("EMA", Event.BATCH_END)]


def numbers_bytes(values) -> int:
    """Size of the numbers among ``values`` that are objects of their own (not the small ints Python shares)."""
    small = range(-5, 257)
    return sum(sys.getsizeof(v) for v in values if type(v) is float or (type(v) is int and v not in small))


def rows_bytes(trace) -> int:
    """Deep size of the rows in memory: each column (a list: its pointers and the numbers only it
    holds, as the strings, labels and ``changed`` tuples are shared between rows; an array: its
    buffer) where the trace holds columns (``_events``, ``_calls``); else, a trace of records,
    their list, each record's tuple and its numbers."""
    if hasattr(getattr(trace, "_events", None), "columns"):
        return sum(sys.getsizeof(column) + (numbers_bytes(column) if isinstance(column, list) else 0)
                   for rows in (trace._events, trace._calls) for column in rows.columns)
    return sum(sys.getsizeof(rows) + sum(sys.getsizeof(row) + numbers_bytes(row) for row in rows)
               for rows in (trace.event_rows, trace.invocation_rows))


def trace_memory(trace) -> int:
    """Bytes the trace holds in memory: its rows, and (after) its arrow buffers and chunk list."""
    import pyarrow as pa

    held = rows_bytes(trace)
    store = getattr(trace, "_store", None)
    return held + (pa.total_allocated_bytes() + len(json.dumps(store.chunks)) if store is not None else 0)


def rss_bytes() -> int:
    """The process's resident memory now (Linux; 0 elsewhere): a check on the trace's own count."""
    statm = Path("/proc/self/statm")
    return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") if statm.exists() else 0


def record_ns(repeats: int = 20, rows: int = 20_000) -> dict[str, float]:
    """The trace's own cost of recording a row, ``Trace.add_call`` and ``Trace.add_event`` with
    their fields by name, as the engine calls them (CPU time, the best of ``repeats`` runs of
    ``rows`` rows, no spill)."""
    call = dict(seq=100_000, event="batch_end", batch=5_000, name="EMA", kind="algorithm", matched=False, order=None,
                exit_code=None, duration=None, changed=None, error=None, closure_call=0, epoch=5)
    event = dict(seq=100_000, event="batch_end", epoch=5, batch=5_000, batch_in_epoch=0, microbatch=None,
                 t_start=1.0, t_end=2.0, closure_call=0)

    def best(add_name: str, fields: dict) -> float:
        times = []
        for _ in range(repeats):
            add = getattr(Trace("all", chunk_rows=1 << 40), add_name)
            t0 = time.process_time()
            for _ in range(rows):
                add(**fields)
            times.append(time.process_time() - t0)
        return 1e9 * min(times) / rows

    return {"add_call": best("add_call", call), "add_event": best("add_event", event)}


def checkpoint_seconds(trace, folder: Path) -> tuple[float, int]:
    """Time of a checkpoint's trace part, written with torch.save (and its bytes)."""
    t0 = time.perf_counter()
    if hasattr(trace, "checkpoint"):  # after: chunks by reference, the rows in memory as bytes
        trace.spill_to(folder / "trace_chunks")
        payload = trace.checkpoint()
    else:  # before: every frame as parquet bytes (composer_lab.trainer.checkpoint.training_payload)
        from composer_lab.trainer.checkpoint import frame_to_bytes

        payload = {name: frame_to_bytes(getattr(trace, name)) for name in ("events", "invocations", "notes")}
    path = folder / f"ckpt-{trace.seq}.pt"
    torch.save({"trace": payload}, path)
    return time.perf_counter() - t0, path.stat().st_size


def query_seconds(trace) -> dict[str, float]:
    """Time to answer the issue's two questions (before: from the whole frames), nothing cached."""
    trace._cache.clear()
    times = {}
    t0 = time.perf_counter()
    if hasattr(trace, "query"):
        calls = trace.query("invocations", name="SelectiveBackprop", batches=(1000, 2000), matched=True)
    else:
        inv = trace.invocations
        calls = inv[(inv.name == "SelectiveBackprop") & inv.batch.between(1000, 1999) & inv.matched]
    times["calls of SelectiveBackprop, batches 1000-2000"] = time.perf_counter() - t0
    assert len(calls) == 1000, len(calls)
    t0 = time.perf_counter()
    if hasattr(trace, "query"):
        events = trace.query("events", epoch=3)
    else:
        ev = trace.events
        events = ev[ev.epoch == 3]
    times["events of epoch 3"] = time.perf_counter() - t0
    assert len(events) > 13 * 999, len(events)
    return times


def build_seconds(trace) -> float:
    """Time to build the whole ``trace.invocations`` frame, nothing cached."""
    trace._cache.clear()
    t0 = time.perf_counter()
    assert len(trace.invocations) > 0
    return time.perf_counter() - t0


def run(steps: int, marks: list[int], chunk_rows: int) -> dict:
    """Train ``steps`` steps; at each of ``marks`` time a checkpoint and measure the trace
    (after: ``chunk_rows`` events a chunk)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = State(model, f"{steps}ba", optimizers=[opt])
    state.algorithms = algorithms()
    engine = Engine(state, trace=Trace("all", chunk_rows=chunk_rows) if hasattr(Trace, "spill") else "all")
    trace, fire = engine.trace, engine.run_event
    out: dict = {"steps": steps, "marks": {}}
    folder = Path(tempfile.mkdtemp(prefix="trace_scale-"))
    fire(Event.INIT)
    fire(Event.FIT_START)
    t_train, t0 = 0.0, time.perf_counter()
    with engine.watching():
        for step in range(1, steps + 1):
            if step % EPOCH_STEPS == 1:
                fire(Event.EPOCH_START)
            for event in STEP:
                if event is Event.AFTER_FORWARD:
                    state.outputs = model(x)
                elif event is Event.AFTER_LOSS:
                    state.loss = torch.nn.functional.cross_entropy(state.outputs, y)
                elif event is Event.AFTER_BACKWARD:
                    state.loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                fire(event)
            state.timestamp = state.timestamp.to_next_batch(samples=16)
            if step % EPOCH_STEPS == 0:
                fire(Event.EPOCH_END)
                state.timestamp = state.timestamp.to_next_epoch()
                fire(Event.EPOCH_CHECKPOINT)
            if step in marks:
                t_train += time.perf_counter() - t0
                seconds, size = checkpoint_seconds(trace, folder)
                out["marks"][step] = {"checkpoint_s": seconds, "checkpoint_bytes": size,
                                      "trace_memory_bytes": trace_memory(trace), "rss_bytes": rss_bytes(),
                                      "rows_in_memory": len(trace.event_rows) + len(trace.invocation_rows),
                                      "chunk_bytes_on_disk": sum(p.stat().st_size for p in folder.rglob("*.parquet"))}
                if step == 20_000:
                    out["build_invocations_s_20k"] = build_seconds(trace)
                t0 = time.perf_counter()
    t_train += time.perf_counter() - t0
    out["us_per_step"] = 1e6 * t_train / steps
    out["query_s"] = query_seconds(trace)
    out["record_ns"] = record_ns()
    shutil.rmtree(folder)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--before-steps", type=int, default=20_000)
    parser.add_argument("--before", default="/tmp/before")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--chunk-rows", type=int, default=1 << 16, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "trace_scale.json"))
    args = parser.parse_args()
    if args.child:  # one tree's run, as JSON on stdout
        marks = sorted({m for m in (5_000, 10_000, 20_000, 100_000, 200_000) if m <= args.steps} | {args.steps})
        print(json.dumps(run(args.steps, marks, args.chunk_rows)))
        return
    results = {}
    runs = (("before", args.before_steps, args.before, 0), ("after", args.steps, None, 1 << 16),
            ("after_no_spill", args.before_steps, None, 1 << 40))  # (this tree's engine cost without spills)
    for tree, steps, path, chunk_rows in runs:
        env = {**os.environ, "PYTHONPATH": path} if path else {**os.environ, "PYTHONPATH": ""}
        cmd = [sys.executable, __file__, "--child", "--steps", str(steps), "--chunk-rows", str(chunk_rows)]
        child = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True,
                               cwd=path or Path(__file__).resolve().parents[1])
        results[tree] = json.loads(child.stdout.strip().splitlines()[-1])
        print(tree, json.dumps(results[tree], indent=1))
    before, after = results["before"], results["after"]
    b_marks, a_marks = before["marks"], after["marks"]
    last_b = str(args.before_steps)
    per_k_before = b_marks[last_b]["trace_memory_bytes"] / (args.before_steps / 1000)
    ckpt_per_step_before = b_marks[last_b]["checkpoint_s"] / args.before_steps
    summary = {
        "trace_memory_MB_per_1000_steps": {"before": per_k_before / 1e6,
                                           "after_growth_20k_to_end": (a_marks[str(args.steps)]["trace_memory_bytes"]
                                                                       - a_marks["20000"]["trace_memory_bytes"])
                                           / ((args.steps - 20_000) / 1000) / 1e6},
        "trace_memory_MB_after_max_over_run": max(m["trace_memory_bytes"] for m in a_marks.values()) / 1e6,
        "trace_memory_MB_at": {f"before_{args.before_steps // 1000}k": b_marks[last_b]["trace_memory_bytes"] / 1e6,
                               "after_20k": a_marks["20000"]["trace_memory_bytes"] / 1e6,
                               f"after_{args.steps // 1000}k": a_marks[str(args.steps)]["trace_memory_bytes"] / 1e6,
                               "before_1M_extrapolated": per_k_before * 1000 / 1e6},
        "checkpoint_s": {f"before_{args.before_steps // 1000}k": b_marks[last_b]["checkpoint_s"],
                         "before_200k_extrapolated": ckpt_per_step_before * 200_000,
                         "before_1M_extrapolated": ckpt_per_step_before * 1_000_000,
                         "after_20k": a_marks["20000"]["checkpoint_s"],
                         f"after_{args.steps // 1000}k": a_marks[str(args.steps)]["checkpoint_s"]},
        "checkpoint_MB": {f"before_{args.before_steps // 1000}k": b_marks[last_b]["checkpoint_bytes"] / 1e6,
                          "after_20k": a_marks["20000"]["checkpoint_bytes"] / 1e6,
                          f"after_{args.steps // 1000}k": a_marks[str(args.steps)]["checkpoint_bytes"] / 1e6},
        "chunks_MB_on_disk_per_1000_steps_after": a_marks[str(args.steps)]["chunk_bytes_on_disk"] / (args.steps / 1000)
        / 1e6,
        "query_s": {f"before_{args.before_steps // 1000}k": before["query_s"],
                    f"after_{args.steps // 1000}k": after["query_s"]},
        "us_per_step": {"before": before["us_per_step"], "after": after["us_per_step"],
                        "after_without_spills": results["after_no_spill"]["us_per_step"]},
        "build_whole_invocations_s_20k": {"before": before.get("build_invocations_s_20k"),
                                          "after": after.get("build_invocations_s_20k")},
    }
    print(json.dumps(summary, indent=1))
    Path(args.out).write_text(json.dumps({"summary": summary, "runs": results, "python": platform.python_version(),
                                          "torch": torch.__version__, "machine": platform.machine(),
                                          "cpus": os.cpu_count()}, indent=1))


if __name__ == "__main__":
    main()
