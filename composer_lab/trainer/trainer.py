"""The Trainer: the fit / eval / predict loops, firing every event where the seeds place it."""

from __future__ import annotations

import atexit
import os
import threading
import time
import uuid
from typing import Any, Callable, Optional, Sequence, Union

import torch

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.callback import Callback
from composer_lab.core.checks import check_positive_int
from composer_lab.core.engine import Engine
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import NO_AUTOCAST, EditCountingList, State
from composer_lab.core.time import Time, TimeUnit
from composer_lab.core.trace import Trace
from composer_lab.trainer import distributed
from composer_lab.trainer.adapter import ModelAdapter
from composer_lab.trainer.batching import batch_size, split_batch
from composer_lab.trainer.checkpoint import CheckpointSaver, resume, training_payload
from composer_lab.trainer.checks import check_components, check_dataloader, check_microbatch_size
from composer_lab.trainer.devices import make_grad_scaler, move_to_device, resolve_device, resolve_precision
from composer_lab.trainer.duration import duration_change_note, max_duration_after, reached_max_duration
from composer_lab.trainer.feed import BatchFeed
from composer_lab.trainer.failures import InterruptGuard, NonFiniteWatch, abandon_batch, note_failure
from composer_lab.trainer.inference import PREDICT_EVENTS, evaluate, run_inference
from composer_lab.trainer.interval import Interval
from composer_lab.trainer.lifecycle import LoopLock, close_at_exit
from composer_lab.trainer.metrics import EvalMetrics, Throughput
from composer_lab.trainer.progress import ProgressBar
from composer_lab.trainer.rng import seed_all
from composer_lab.trainer.run import Run, default_run_name, run_config

# The events of a batch (and the epoch unit) as module names, read at every batch: on Python 3.11 a
# member read off an Enum class goes through EnumType.__getattr__, about 90 ns each.
BEFORE_DATALOADER, AFTER_DATALOADER, BATCH_START, BATCH_END, BATCH_CHECKPOINT = (
    Event.BEFORE_DATALOADER, Event.AFTER_DATALOADER, Event.BATCH_START, Event.BATCH_END, Event.BATCH_CHECKPOINT)
BEFORE_TRAIN_BATCH, AFTER_TRAIN_BATCH = Event.BEFORE_TRAIN_BATCH, Event.AFTER_TRAIN_BATCH
BEFORE_FORWARD, AFTER_FORWARD, BEFORE_LOSS, AFTER_LOSS, BEFORE_BACKWARD, AFTER_BACKWARD = (
    Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BEFORE_BACKWARD,
    Event.AFTER_BACKWARD)
EPOCH = TimeUnit.EPOCH

__all__ = ["Trainer", "DEFAULT_LR", "THROUGHPUT_EVERY"]

DEFAULT_LR = 0.05
"""Learning rate of the default optimizer, SGD with momentum 0.9."""
THROUGHPUT_EVERY = 50
"""'throughput/samples_per_sec' is logged every this many batches (host timings) and at epoch ends."""

_NO_GRAPH = Algorithm.backwards_create_graph  # (the base class's property: False)


class Trainer:
    """Trains ``model`` on ``train_dataloader`` for ``max_duration``, running ``algorithms``
    and ``callbacks`` through an :class:`Engine` at every event.

    Args:
        model: an ``nn.Module`` used with ``loss_fn(outputs, targets)``, or an ``nn.Module``
            with ``forward(batch)`` and ``loss(outputs, batch)`` (then ``loss_fn`` is None).
        train_dataloader: yields ``(input, target)`` pairs or dicts with 'input' and 'target'.
        max_duration: how long :meth:`fit` trains, e.g. '3ep', '600ba', '10000sp'.
        optimizers: default SGD(lr=:data:`DEFAULT_LR`, momentum=0.9), built after INIT so
            model surgery is seen. schedulers: stepped after every optimizer step.
        eval_dataloader, eval_interval: evaluate every '1ep' or 'Nba' during fit.
        algorithm_passes: extra passes for the engine (``f``, ``(f, index)`` or a list).
        device: 'cpu' or 'gpu'; None picks cuda when available. precision: 'fp32',
            'amp_bf16' or 'amp_fp16' (autocast; fp16 adds a GradScaler).
        device_train_microbatch_size: split each batch into microbatches of this many examples;
            gradients accumulate to those of the whole batch.
        seed: seeds every generator, so two runs with one seed are identical.
        save_folder, save_interval: write checkpoints there every '1ep' / 'Nba'.
        load_path: resume from this checkpoint.
        trace: 'all', 'ran' or 'off' (see :data:`~composer_lab.core.trace.TRACE_LEVELS`).
        progress_bar: show a tqdm.auto bar. run_name: names the run (default: the start time).
        stop_on_nonfinite_loss: raise :class:`NonFiniteLossError` naming the first batch whose loss
            is NaN or infinite: True checks on the device, read at the flushes (the batches up to
            then are applied); 'before_step' stops before its optimizer step (one host read per
            batch); False: no check.
        flush_interval: the host reads the device (the non-finite check, logged tensors copied out in
            bulk) every this many batches, at epoch ends, evaluations, checkpoints and fit's end.
        shard_dataloaders: under torchrun, split the dataloaders across the ranks (the default);
            False when each rank's dataloaders already read that rank's own share (an
            IterableDataset that splits itself, a sampler of your own): they are used as given.

    A failure or interrupt (KeyboardInterrupt) during :meth:`fit` leaves a consistent trainer:
    the batch in flight is either applied (optimizer step and timestamp) or not at all, the
    trace notes which, and the next ``fit()`` continues from there.

    Under ``torchrun`` (:mod:`composer_lab.trainer.distributed`) each rank trains on its shard
    of the dataloaders (``batch_size`` is per rank) through DistributedDataParallel;
    ``state.model`` stays the plain module, rank 0 writes the checkpoints and keeps the metrics,
    and after ``fit`` :attr:`rank_traces` holds every rank's trace on rank 0.
    """

    def __init__(self, model: torch.nn.Module, train_dataloader: Any, max_duration: Union[str, Time],
                 loss_fn: Optional[Callable[..., torch.Tensor]] = None, optimizers: Any = None,
                 schedulers: Any = None, eval_dataloader: Any = None, eval_interval: Union[str, Time] = "1ep",
                 algorithms: Sequence[Algorithm] = (), callbacks: Sequence[Callback] = (),
                 algorithm_passes: Any = None, device: Union[str, torch.device, None] = None,
                 precision: Optional[str] = None, device_train_microbatch_size: Optional[int] = None,
                 seed: int = 0, save_folder: Union[str, os.PathLike, None] = None,
                 save_interval: Union[str, Time] = "1ep", load_path: Union[str, os.PathLike, None] = None,
                 trace: Union[str, Trace] = "all", progress_bar: bool = True,
                 run_name: Optional[str] = None, stop_on_nonfinite_loss: Union[bool, str] = True,
                 shard_dataloaders: bool = True, flush_interval: int = 50) -> None:
        seed_all(seed)
        self.adapter = ModelAdapter(model, loss_fn)
        algorithms, user_callbacks = check_components(train_dataloader, eval_dataloader, algorithms, callbacks,
                                                      optimizers, schedulers)
        self.microbatch_size = check_microbatch_size(device_train_microbatch_size)
        device = distributed.setup(resolve_device(device))  # under torchrun: the process group, this rank's GPU
        rank = distributed.get_rank()
        if rank:
            seed_all(seed + rank)  # each rank its own random streams, as in Composer
        precision = resolve_precision(precision, device)
        self.eval_interval = Interval(eval_interval, "eval_interval")
        self.shard_dataloaders = shard_dataloaders
        self.eval_dataloader = self._rank_share(eval_dataloader, "eval_dataloader", seed)
        train_dataloader = self._rank_share(train_dataloader, "train_dataloader", seed)
        run_name = distributed.broadcast_object(run_name or default_run_name())  # one name for every rank

        self.state = State(model, max_duration, optimizers=optimizers, schedulers=schedulers,
                           dataloader=train_dataloader, algorithms=algorithms, precision=precision,
                           device=device, seed=seed, run_name=run_name, rank=rank)
        self.state.loss_fn = loss_fn
        self.logger = Logger(self.state) if rank == 0 else distributed.SilentLogger(self.state)
        self.engine = Engine(self.state, self.logger, algorithm_passes, trace)
        self.progress_bar = ProgressBar() if progress_bar and rank == 0 else None
        self.checkpoint_saver = (CheckpointSaver(save_folder, Interval(save_interval, "save_interval"),
                                                 self.checkpoint_payload) if save_folder is not None else None)
        self.state.callbacks = [*user_callbacks, *[cb for cb in (self.progress_bar, self.checkpoint_saver) if cb]]
        self.trace.meta.setdefault("started_at", time.time())  # (the wall clock its times count from: exports)
        for callback in self.state.callbacks:
            callback.attach(self)  # (trackers read the run; each callback hears of a failed fit: fit_failed)
        self.eval_metrics = EvalMetrics()
        self.throughput = Throughput()
        self.scaler = make_grad_scaler(precision, device)
        self.nonfinite = NonFiniteWatch(stop_on_nonfinite_loss)
        self.flush_interval = check_positive_int("flush_interval", flush_interval)
        self.ddp = distributed.DDPModel()
        self.run_id = distributed.broadcast_object(uuid.uuid4().hex)
        """Tells this run from another of the same name (a resumed run keeps its checkpoint's)."""
        self.resumed_from: Optional[dict[str, Any]] = None
        self.feed = BatchFeed(self.state)
        self._epoch_started = False  # EPOCH_START has fired for the epoch in progress
        self._batch_seq = 0  # the trace's seq when the batch in flight was taken
        self._graph_askers: list[Algorithm] = []  # the algorithms that may ask for a backward graph
        self._askers_generation = -1  # EditCountingList.generation when they were worked out
        self._guard = InterruptGuard()
        self._loop_lock = LoopLock()
        self._boundary_lock = threading.RLock()  # (a change may make another: it runs at once then)
        self._between_batches: Optional[list[Callable[[], None]]] = None  # a list while a fit runs
        self._rank_traces: Optional[distributed.RankTraces] = None
        self._close_at_exit = close_at_exit(self)

        self.engine.run_event(Event.INIT)
        self.state.model.to(device)
        self.ddp.wrap(self.state)
        if not self.state.optimizers:
            self.state.optimizers = [torch.optim.SGD(self.state.model.parameters(), lr=DEFAULT_LR, momentum=0.9)]
        self.engine.run_event(Event.BEFORE_LOAD)
        if load_path is not None:
            resume(self, load_path)
        self.engine.run_event(Event.AFTER_LOAD)
        if self.checkpoint_saver is not None:
            self.checkpoint_saver.claim(self.run_id, run_name, self.trace)

    # -- views --------------------------------------------------------------------------------
    @property
    def trace(self) -> Trace:
        """The engine's trace of this run."""
        return self.engine.trace

    @property
    def metrics(self) -> Any:
        """The logged metrics: a tidy DataFrame (``batch``, ``epoch``, ``phase``, ``name``, ``value``)."""
        return self.logger.metrics

    @property
    def busy(self) -> bool:
        """Whether a loop (fit, eval, predict, close) runs now in another thread than the caller's:
        the trace and the metrics read from here are consistent snapshots up to some event, but the
        state (batch, outputs, model) is the loop's, mid-step (the lab's conflict table waits)."""
        return self._loop_lock.busy

    @property
    def checkpoints(self) -> list:
        """Paths of the checkpoints written so far."""
        return list(self.checkpoint_saver.saved) if self.checkpoint_saver else []

    def to_run(self) -> Run:
        """This run as a :class:`~composer_lab.trainer.run.Run`: its config
        (:func:`~composer_lab.trainer.run.run_config`), trace and metrics."""
        return Run(self.state.run_name, run_config(self), self.trace, self.metrics, self._rank_traces)

    @property
    def rank_traces(self) -> distributed.RankTraces:
        """The trace's ``events``, ``invocations`` and ``notes`` with a leading ``rank`` column, and ``query``.
        On rank 0 under torchrun: every rank's, as the last :meth:`fit` or :meth:`gather_traces` left them."""
        if self._rank_traces is not None:
            return self._rank_traces
        return distributed.rank_frames(self.trace, self.state.rank)

    def gather_traces(self) -> distributed.RankTraces:
        """Bring what is new of every rank's trace to rank 0 now (kept in the ``save_folder`` if given) and return
        :attr:`rank_traces`. Under torchrun every rank must call it (``fit`` does, at its end)."""
        saved = self.checkpoint_saver and self.checkpoint_saver.folder
        self._rank_traces = distributed.gather_traces(self.trace, self._rank_traces, saved)
        return self.rank_traces

    def _rank_share(self, dataloader: Any, name: str, seed: int) -> Any:
        """What this rank reads of ``dataloader``: its shard under torchrun (see ``shard_dataloaders``)."""
        return distributed.shard_dataloader(dataloader, name, seed) if self.shard_dataloaders else dataloader

    # -- fit ------------------------------------------------------------------------------------
    def fit(self, duration: Union[str, Time, None] = None) -> None:
        """Train until ``max_duration``; ``duration`` trains that much more (and extends
        ``max_duration``, noted in the trace), so ``fit`` can be called again to continue.

        Works from any thread; a trainer runs one loop at a time: a call while a fit, eval,
        predict or close is under way (another thread, the lab's run panel, a callback) raises
        :class:`~composer_lab.trainer.lifecycle.TrainerBusy`, a RuntimeError."""
        state = self.state
        with self._loop_lock.hold("fit", state.run_name, state.timestamp.batch):
            if duration is not None:
                longer = max_duration_after(state.timestamp, duration)
                if longer != state.max_duration:
                    self.trace.note("duration", duration_change_note(state, longer), state.timestamp)
                state.max_duration = longer
            self._between_batches = []
            try:
                self._fit()
            finally:
                with self._boundary_lock:  # from here on, a change runs at once
                    self.apply_changes()
                    self._between_batches = None

    def between_batches(self, change: Callable[[], None]) -> None:
        """Run ``change`` (a change of algorithms or passes) at the next batch boundary, after
        BATCH_END in the thread that trains, when a fit runs in another thread (the lab's run
        panel): a change never lands between two events of one batch (LabelSmoothing's
        BEFORE_LOSS and AFTER_LOSS). Run now otherwise."""
        with self._boundary_lock:
            if self._between_batches is not None and self.busy:
                self._between_batches.append(change)
                return
        change()

    def apply_changes(self) -> None:
        """Run the changes :meth:`between_batches` queued, in the calling thread: the loop does
        after each BATCH_END; a callback that waits at a batch boundary (the run panel's pause)
        calls it while it waits, so changes made meanwhile hold at once."""
        with self._boundary_lock:
            changes = list(self._between_batches or ())
            if self._between_batches:
                self._between_batches.clear()
            for change in changes:
                change()

    def _fit(self) -> None:
        """The loop of :meth:`fit`, from FIT_START to FIT_END."""
        state, run = self.state, self.engine.run_event
        with self._guard, self.engine.watching():
            try:
                run(Event.FIT_START)
                self.throughput.mark(state.timestamp.sample)
                while not reached_max_duration(state.timestamp, state.max_duration):
                    self._train_epoch()
                self._flush()
                run(Event.FIT_END)
                self.gather_traces()
            except BaseException as err:
                self._after_failure(err)
                raise

    def _train_epoch(self) -> None:
        """One epoch, or what is left of it: its batches until the data runs out (or the run
        ends mid-epoch), then EPOCH_END, the evaluation and checkpoint due."""
        state, run = self.state, self.engine.run_event
        if not self._epoch_started and state.timestamp.batch_in_epoch == 0:
            self.feed.restore_random_state()  # a run resumed at this epoch's start
            run(Event.EPOCH_START)
        self._epoch_started = True
        self.feed.open_epoch()
        per_epoch = state.dataloader_len
        while True:
            run(BEFORE_DATALOADER)
            batch = self.feed.next()
            if batch is None:
                break
            self._batch_seq = self.engine.trace.seq
            state.batch = move_to_device(batch, state.device)
            run(AFTER_DATALOADER)
            samples = batch_size(state.batch)
            run(BATCH_START)
            self._train_batch(samples)
            run(BATCH_END)
            if self._between_batches:
                self.apply_changes()
            done, saver = state.timestamp, self.checkpoint_saver
            if done.batch % self.flush_interval == 0 or (saver is not None and saver.interval.due_after_batch(done)):
                self._flush()  # every flush_interval batches, and before a checkpoint
            if self.eval_dataloader is not None and self.eval_interval.due_after_batch(done):
                self._evaluate(self.eval_dataloader)
            run(BATCH_CHECKPOINT)
            # Stop mid-epoch (the next fit continues this epoch) unless the run is counted in epochs
            # (max_duration read each batch: stop_training changes it) or this epoch's data is done.
            duration, ts = state.max_duration, state.timestamp
            if (duration.unit is not EPOCH and (per_epoch is None or ts.batch_in_epoch < per_epoch)
                    and reached_max_duration(ts, duration)):
                return
        self.feed.close_epoch()
        self._epoch_started = False
        if state.timestamp.batch_in_epoch == 0:
            raise ValueError("train_dataloader yielded no batches this epoch; give it at least one batch "
                             "(check the dataset's length, batch_size and drop_last)")
        self._flush()
        self.throughput.log(self.logger, state.timestamp.sample)
        state.timestamp = state.timestamp.to_next_epoch()
        run(Event.EPOCH_END)
        if self.eval_dataloader is not None and self.eval_interval.due_after_epoch(state.timestamp):
            self._evaluate(self.eval_dataloader)
        run(Event.EPOCH_CHECKPOINT)

    def _train_batch(self, samples: int) -> None:
        """Forward, loss and backward per microbatch, then the optimizer step."""
        state, run = self.state, self.engine.run_event
        run(BEFORE_TRAIN_BATCH)
        for optimizer in state.optimizers:
            optimizer.zero_grad(set_to_none=True)
        full_batch, size = state.batch, self.microbatch_size
        microbatches = [full_batch] if size is None or size >= samples else split_batch(full_batch, size)
        create_graph = self._create_graph()
        if len(microbatches) == 1:
            total_loss = self._train_microbatch(0, full_batch, 1.0, True, create_graph)
        else:
            total_loss = 0.0  # the batch's loss: the sum of the microbatches', weighted by their share
            for index, microbatch in enumerate(microbatches):
                share = batch_size(microbatch) / samples
                loss = self._train_microbatch(index, microbatch, share, index == len(microbatches) - 1, create_graph)
                total_loss = total_loss + loss.detach()
            state.batch = full_batch
        state.microbatch = None
        if self.ddp.enabled:  # (one process: no collectives, nor asking torch.distributed for them)
            total_loss = distributed.mean_over_ranks(total_loss.detach(), samples)  # every rank agrees
            samples = distributed.sum_over_ranks(samples)
        logged = self.nonfinite.watch(total_loss.detach(), self.engine.trace, state.timestamp, self._batch_seq)
        if self.scaler is not None:
            for optimizer in state.optimizers:
                self.scaler.unscale_(optimizer)
        run(AFTER_TRAIN_BATCH)
        self._apply_step(samples, logged)

    def _create_graph(self) -> bool:
        """Whether this batch's backward builds a graph (an algorithm's ``backwards_create_graph``).
        Only an algorithm whose class overrides :attr:`Algorithm.backwards_create_graph` can say so:
        those are worked out again when :attr:`EditCountingList.generation` moved (the list assigned
        or edited), and asked every batch (a property may change its answer)."""
        if self._askers_generation != EditCountingList.generation:
            generation = EditCountingList.generation  # (read first: an edit meanwhile moves it again)
            self._graph_askers = [a for a in self.state.algorithms
                                  if getattr(type(a), "backwards_create_graph", None) is not _NO_GRAPH]
            self._askers_generation = generation
        return any([a.backwards_create_graph for a in self._graph_askers]) if self._graph_askers else False

    def _train_microbatch(self, index: int, microbatch: Any, share: float, last: bool,
                          create_graph: bool) -> torch.Tensor:
        """Forward, loss and backward of one microbatch, its loss weighted by its ``share`` of
        the batch (gradients add up to the whole batch's); returns that loss."""
        state, run, adapter, scaler, ddp = self.state, self.engine.run_event, self.adapter, self.scaler, self.ddp
        precision = state.precision_context()
        state.microbatch, state.batch = index, microbatch
        run(BEFORE_FORWARD)
        # fp32 on one process (the usual CPU step) enters no context: a nullcontext's enter and exit are Python calls
        if precision is NO_AUTOCAST and not ddp.enabled:
            state.outputs = adapter.forward(state.model, state.batch)
        else:
            with precision, ddp.training_forward(state, last) as model:  # (under torchrun: DDP's wrapper)
                state.outputs = adapter.forward(model, state.batch)
        run(AFTER_FORWARD)
        run(BEFORE_LOSS)
        if precision is NO_AUTOCAST:
            state.loss = adapter.loss(state.model, state.outputs, state.batch)
        else:
            with precision:
                state.loss = adapter.loss(state.model, state.outputs, state.batch)
        run(AFTER_LOSS)
        run(BEFORE_BACKWARD)
        loss = state.loss if share == 1.0 else state.loss * share
        (scaler.scale(loss) if scaler is not None else loss).backward(create_graph=create_graph)
        run(AFTER_BACKWARD)
        return loss

    def _apply_step(self, samples: int, loss: Any) -> None:
        """Optimizer and scheduler steps, the step's metrics and the timestamp advance: the
        batch is applied. A stop pressed meanwhile waits until all of it is done."""
        state, scaler, guard = self.state, self.scaler, self._guard
        guard.held = True
        try:
            for optimizer in state.optimizers:
                if scaler is not None:
                    scaler.step(optimizer)
                else:
                    optimizer.step()
            if scaler is not None:
                scaler.update()
            for scheduler in state.schedulers:
                scheduler.step()
            self.logger.log_train_step(loss, state.optimizers[0].param_groups[0]["lr"])
            if (state.timestamp.batch + 1) % THROUGHPUT_EVERY == 0:
                self.throughput.log(self.logger, state.timestamp.sample + samples)
            state.timestamp = state.timestamp.to_next_batch(samples)
            self.feed.applied()
        finally:
            guard.release()

    def _flush(self) -> None:
        """Read the device on the host, once: the logged tensors copied out in bulk, then the
        non-finite check of the losses among them."""
        self.nonfinite.check(self.engine.trace, self.state.timestamp, self.logger.flush())

    def _after_failure(self, err: BaseException) -> None:
        """Leave the trainer consistent after ``err`` ended a fit: a batch in flight is not
        applied (gradients cleared, kept to train again); the trace notes what happened."""
        applied = self.feed.in_flight is None
        if not applied:
            self.scaler = abandon_batch(self.state, self.scaler)
        note_failure(self.trace, err, self.engine.event, self.state.timestamp, applied)
        for callback in self.state.callbacks:
            callback.fit_failed(err)

    # -- eval and predict -----------------------------------------------------------------------
    def eval(self, eval_dataloader: Any = None) -> dict[str, float]:
        """Evaluate now on ``eval_dataloader`` (default: the trainer's), between
        EVAL_STANDALONE_START and EVAL_STANDALONE_END; returns the metrics as floats.
        EVAL_BEFORE_ALL / EVAL_AFTER_ALL fire too, unlike in Composer, so algorithms that swap
        weights for evaluation (EMA) swap for this one as well. Refused while another loop runs,
        as :meth:`fit` is."""
        dataloader = (self._rank_share(eval_dataloader, "eval_dataloader", self.state.seed)
                      if eval_dataloader is not None else self.eval_dataloader)
        if dataloader is None:
            raise ValueError("eval() needs data: pass Trainer(eval_dataloader=...) or trainer.eval(dataloader)")
        check_dataloader(dataloader, "eval_dataloader")
        with self._loop_lock.hold("eval", self.state.run_name, self.state.timestamp.batch):
            self.engine.run_event(Event.EVAL_STANDALONE_START)
            results = self._evaluate(dataloader)
            self.engine.run_event(Event.EVAL_STANDALONE_END)
        return {name: float(value) for name, value in results.items()}

    def _evaluate(self, dataloader: Any) -> dict[str, torch.Tensor]:
        """One evaluation (:func:`~composer_lab.trainer.inference.evaluate`), after a read of the device."""
        self._flush()
        return evaluate(self.engine, self.adapter, dataloader, self.eval_metrics)

    def predict(self, dataloader: Any) -> list:
        """The model's outputs (detached, on the device) for each batch of ``dataloader``.
        Refused while another loop runs, as :meth:`fit` is."""
        check_dataloader(dataloader, "dataloader")
        outputs: list = []
        with self._loop_lock.hold("predict", self.state.run_name, self.state.timestamp.batch):
            run_inference(self.engine, self.adapter, dataloader, PREDICT_EVENTS, lambda s: outputs.append(s.outputs))
            self.engine.run_event(Event.PREDICT_END)
        return outputs

    # -- checkpoints and closing -------------------------------------------------------------------
    def checkpoint_payload(self) -> Optional[dict[str, Any]]:
        """What a checkpoint of this run holds (:func:`~composer_lab.trainer.checkpoint.training_payload`);
        under torchrun every rank calls it and rank 0 gets the payload, the others None."""
        return training_payload(self)

    def close(self) -> None:
        """End the run's callbacks, as Composer does: each one's ``close(state, logger)``, then
        ``post_close()`` (:meth:`Engine.close`); the engine runs no events after. Also called at
        interpreter exit for a trainer still alive then; a second call does nothing. Refused while
        another loop runs, as :meth:`fit` is."""
        with self._loop_lock.hold("close", self.state.run_name, self.state.timestamp.batch):
            atexit.unregister(self._close_at_exit)
            self.engine.close()

