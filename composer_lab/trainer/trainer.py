"""The Trainer: the fit / eval / predict loops, firing every event where the seeds place it."""

from __future__ import annotations

import atexit
import os
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
from composer_lab.core.state import State
from composer_lab.core.time import Time
from composer_lab.core.trace import Trace
from composer_lab.trainer import distributed
from composer_lab.trainer.adapter import ModelAdapter
from composer_lab.trainer.batching import batch_size
from composer_lab.trainer.boundary import BatchBoundary
from composer_lab.trainer.checkpoint import CheckpointSaver, resume, training_payload
from composer_lab.trainer.clock import WallClock
from composer_lab.trainer.closure import BatchClosure
from composer_lab.trainer.checks import check_components, check_dataloader, check_microbatch_size
from composer_lab.trainer.devices import make_grad_scaler, move_to_device, resolve_device, resolve_precision
from composer_lab.trainer.duration import plan_fit, reached_end
from composer_lab.trainer.feed import BatchFeed
from composer_lab.trainer.failures import (FitInterrupted, InterruptGuard, NonFiniteWatch, abandon_batch,
                                          evaluation_skipped, interrupt_message, note_failure)
from composer_lab.trainer.inference import PREDICT_EVENTS, evaluate, run_inference
from composer_lab.trainer.interval import Interval
from composer_lab.trainer.lifecycle import LoopLock, close_at_exit
from composer_lab.trainer.metrics import EvalMetrics, Throughput
from composer_lab.trainer.optimizers import DEFAULT_LR, after_init, with_default
from composer_lab.trainer.progress import ProgressBar
from composer_lab.trainer.rng import seed_all
from composer_lab.trainer.run import Run, default_run_name, run_config
from composer_lab.trainer.step import THROUGHPUT_EVERY, train_batch, watch_loss

__all__ = ["Trainer", "DEFAULT_LR", "THROUGHPUT_EVERY"]



class Trainer:
    """Trains ``model`` on ``train_dataloader`` for ``max_duration``, running ``algorithms``
    and ``callbacks`` through an :class:`Engine` at every event.

    Args:
        model: an ``nn.Module`` used with ``loss_fn(outputs, targets)``, or an ``nn.Module``
            with ``forward(batch)`` and ``loss(outputs, batch)`` (then ``loss_fn`` is None).
        train_dataloader: yields ``(input, target)`` pairs or dicts with 'input' and 'target'.
        max_duration: how long :meth:`fit` trains, e.g. '3ep', '600ba', '10000sp'.
        optimizers: default SGD(lr=:data:`DEFAULT_LR`, momentum=0.9); they exist when INIT fires,
            so an algorithm can wrap or schedule them there. Each steps with the batch as a
            closure (:mod:`~composer_lab.trainer.closure`). schedulers: ``state.schedulers``,
            read and stepped after every optimizer step (an algorithm may replace them).
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

        optimizers, default = with_default(model, optimizers)
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
        self.closure = BatchClosure(self.state, self.engine.run_event, self.adapter, self.ddp, self.microbatch_size,
                                    lambda loss: watch_loss(self, loss))
        self.clock = WallClock()
        """Times the batches for ``state.timestamp``'s ``*_wct`` (give it a fake time source in a test)."""
        self._guard = InterruptGuard()
        self._loop_lock = LoopLock()
        self._boundary = BatchBoundary(lambda: self.busy)
        self._stop: Optional[Time] = None  # where fit(duration) stops, when before max_duration
        self._applied, self._evaluated_at = True, None  # (what the last failure left; the last evaluation's batch)
        self._rank_traces: Optional[distributed.RankTraces] = None
        self._close_at_exit = close_at_exit(self)

        self.engine.run_event(Event.INIT)
        after_init(self.state.optimizers, self.state.model, default)
        self.state.model.to(device)
        self.ddp.wrap(self.state)
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
        """Train until ``max_duration``; ``duration`` trains that much more, so ``fit`` can be
        called again to continue: within ``max_duration`` this fit stops there and max_duration
        stays (schedules in fractions of the run keep their batches); past it, max_duration
        becomes its end (noted in the trace; a warning names the schedules that move).
        An interrupt raises :class:`~composer_lab.trainer.failures.FitInterrupted` (a
        KeyboardInterrupt), one line saying where it stopped and how to resume.

        Works from any thread; a trainer runs one loop at a time: a call while a fit, eval,
        predict or close is under way (another thread, the lab's run panel, a callback) raises
        :class:`~composer_lab.trainer.lifecycle.TrainerBusy`, a RuntimeError."""
        state = self.state
        with self._loop_lock.hold("fit", state.run_name, state.timestamp.batch):
            self._stop = None if duration is None else plan_fit(state, self.trace, duration)
            with self._boundary.open():
                self._fit()

    def between_batches(self, change: Callable[[], None]) -> None:
        """Run ``change`` (a change of algorithms or passes) at the next batch boundary, after
        BATCH_END in the thread that trains, when a fit runs in another thread (the lab's run
        panel): a change never lands between two events of one batch (LabelSmoothing's
        BEFORE_LOSS and AFTER_LOSS). Run now otherwise."""
        self._boundary.defer(change)

    def apply_changes(self) -> None:
        """Run the changes :meth:`between_batches` queued, in the calling thread: the loop does
        after each BATCH_END; a callback that waits at a batch boundary (the run panel's pause)
        calls it while it waits, so changes made meanwhile hold at once."""
        self._boundary.apply()

    def _fit(self) -> None:
        """The loop of :meth:`fit`, from FIT_START to FIT_END."""
        state, run = self.state, self.engine.run_event
        with self._guard, self.engine.watching():
            try:
                run(Event.FIT_START)
                self.throughput.mark(state.timestamp.sample)
                self.clock.start()
                while not reached_end(state.timestamp, [state.max_duration, self._stop], None):
                    self._train_epoch()
                self._flush()
                run(Event.FIT_END)
                self.gather_traces()
            except BaseException as err:
                self._after_failure(err)
                if isinstance(err, KeyboardInterrupt) and not isinstance(err, FitInterrupted):
                    raise FitInterrupted(self._interrupt_message()) from None
                raise

    def _train_epoch(self) -> None:
        """One epoch, or what is left of it: its batches until the data runs out (or the run
        ends mid-epoch), then the epoch's end."""
        if not self._epoch_started and self.state.timestamp.batch_in_epoch == 0:
            self.feed.restore_random_state()  # a run resumed at this epoch's start
            self.engine.run_event(Event.EPOCH_START)
        self._epoch_started = True
        self.feed.open_epoch()
        while True:
            self.engine.run_event(Event.BEFORE_DATALOADER)
            batch = self.feed.next()
            if batch is None:
                break
            self._run_batch(batch)
            if self._stops_mid_epoch():
                return
        self._end_epoch()

    def _run_batch(self, batch: Any) -> None:
        """One batch from AFTER_DATALOADER to BATCH_CHECKPOINT, with the changes queued meanwhile,
        the flush, the evaluation and the checkpoint due after it."""
        state, run = self.state, self.engine.run_event
        self._batch_seq = self.engine.trace.seq
        state.batch = move_to_device(batch, state.device)
        run(Event.AFTER_DATALOADER)
        samples = batch_size(state.batch)
        run(Event.BATCH_START)
        train_batch(self, samples)
        run(Event.BATCH_END)
        if self._boundary.pending:
            self._boundary.apply()
        done, saver = state.timestamp, self.checkpoint_saver
        if done.batch % self.flush_interval == 0 or (saver is not None and saver.interval.due_after_batch(done)):
            self._flush()  # every flush_interval batches, and before a checkpoint
        if self.eval_dataloader is not None and self.eval_interval.due_after_batch(done):
            self._evaluate(self.eval_dataloader)
        run(Event.BATCH_CHECKPOINT)

    def _stops_mid_epoch(self) -> bool:
        """Whether the fit ends before this epoch's data does (the next fit continues the epoch)."""
        return reached_end(self.state.timestamp, [self.state.max_duration, self._stop], self.state.dataloader_len,
                           mid_epoch=True)

    def _end_epoch(self) -> None:
        """The epoch's data ran out: EPOCH_END, the evaluation and checkpoint due."""
        state = self.state
        self.feed.close_epoch()
        self._epoch_started = False
        if state.timestamp.batch_in_epoch == 0:
            raise ValueError("train_dataloader yielded no batches this epoch; give it at least one batch "
                             "(check the dataset's length, batch_size and drop_last)")
        self._flush()
        self.throughput.log(self.logger, state.timestamp.sample)
        state.timestamp = state.timestamp.to_next_epoch()
        self.engine.run_event(Event.EPOCH_END)
        if self.eval_dataloader is not None and self.eval_interval.due_after_epoch(state.timestamp):
            self._evaluate(self.eval_dataloader)
        self.engine.run_event(Event.EPOCH_CHECKPOINT)

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
        self._applied = applied
        for callback in self.state.callbacks:
            callback.fit_failed(err)

    def _interrupt_message(self) -> str:
        ts = self.state.timestamp
        skipped = self._applied and evaluation_skipped(ts, self.eval_interval, self.eval_dataloader is not None,
                                                       self._evaluated_at)
        return interrupt_message(self.engine.event, ts, self._applied, skipped)

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
        self._evaluated_at = self.state.timestamp.batch
        with self.clock.paused():
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


