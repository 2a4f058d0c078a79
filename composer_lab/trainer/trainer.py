"""The Trainer: the fit / eval / predict loops, firing every event where the seeds place it."""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Iterable
from typing import Any, Callable, Optional, Sequence, Union

import torch

from composer_lab.core.algorithm import Algorithm, describe
from composer_lab.core.callback import Callback
from composer_lab.core.engine import Engine
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.passes import pass_name
from composer_lab.core.state import State
from composer_lab.core.time import Time, Timestamp, TimeUnit, ensure_time
from composer_lab.core.trace import Trace
from composer_lab.trainer import distributed
from composer_lab.trainer.adapter import ModelAdapter
from composer_lab.trainer.batching import batch_size, batch_targets, split_batch
from composer_lab.trainer.checkpoint import (CheckpointError, CheckpointSaver, frame_from_bytes, frame_to_bytes,
                                             load_checkpoint)
from composer_lab.trainer.devices import (fresh_grad_scaler, make_grad_scaler, move_to_device, resolve_device,
                                          resolve_precision)
from composer_lab.trainer.failures import InterruptGuard, NonFiniteLossError, failure_note, nonfinite_loss_message
from composer_lab.trainer.interval import Interval
from composer_lab.trainer.metrics import EvalMetrics
from composer_lab.trainer.progress import ProgressBar
from composer_lab.trainer.rng import load_rng_state, preserved_rng, rng_state, seed_all, seed_epoch_shuffle

__all__ = ["Trainer", "DEFAULT_LR", "THROUGHPUT_EVERY"]

DEFAULT_LR = 0.05
"""Learning rate of the default optimizer, SGD with momentum 0.9."""
THROUGHPUT_EVERY = 50
"""'throughput/samples_per_sec' is logged every this many batches (host timings) and at epoch ends."""


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
        stop_on_nonfinite_loss: raise :class:`NonFiniteLossError` before the optimizer step of a
            batch whose loss is NaN or infinite (one host read of the loss per batch).
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
                 run_name: Optional[str] = None, stop_on_nonfinite_loss: bool = True,
                 shard_dataloaders: bool = True) -> None:
        seed_all(seed)
        self.adapter = ModelAdapter(model, loss_fn)
        _check_dataloader(train_dataloader, "train_dataloader")
        if eval_dataloader is not None:
            _check_dataloader(eval_dataloader, "eval_dataloader")
        algorithms = _check_items(algorithms, Algorithm, "algorithms", "an Algorithm instance, e.g. "
                                  "LabelSmoothing(0.1)")
        user_callbacks = _check_items(callbacks, Callback, "callbacks", "a Callback instance (subclass "
                                      "composer_lab.Callback and override e.g. after_loss(state, logger))")
        _check_items(optimizers, torch.optim.Optimizer, "optimizers", "a torch.optim.Optimizer over the model's "
                     "parameters, e.g. torch.optim.SGD(model.parameters(), lr=0.1)")
        _check_items(schedulers, torch.optim.lr_scheduler.LRScheduler, "schedulers", "a learning-rate scheduler "
                     "of torch.optim.lr_scheduler, e.g. StepLR(optimizer, step_size=100)")
        self.microbatch_size = _check_microbatch_size(device_train_microbatch_size)
        device = distributed.setup(resolve_device(device))  # under torchrun: the process group, this rank's GPU
        rank = distributed.get_rank()
        if rank:
            seed_all(seed + rank)  # each rank its own random streams, as in Composer
        precision = resolve_precision(precision, device)
        self.eval_interval = Interval(eval_interval, "eval_interval")
        self.shard_dataloaders = shard_dataloaders
        self.eval_dataloader = self._rank_share(eval_dataloader, "eval_dataloader", seed)
        train_dataloader = self._rank_share(train_dataloader, "train_dataloader", seed)
        run_name = run_name or time.strftime("run-%Y%m%d-%H%M%S-") + f"{time.time_ns() // 1_000_000 % 1000:03d}"
        run_name = distributed.broadcast_object(run_name)  # one name for every rank

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
        self.eval_metrics = EvalMetrics()
        self.scaler = make_grad_scaler(precision, device)
        self.resumed_from: Optional[dict[str, Any]] = None
        self._resumed_rng: Optional[dict[str, Any]] = None  # a checkpoint's random state, until the first batch
        self._batches: Optional[Any] = None  # this epoch's batch iterator (None: open it, past the batches trained)
        self._epoch_started = False  # EPOCH_START has fired for the epoch in progress
        self._in_flight: Any = None  # the batch taken from the dataloader and not yet applied
        self._batch_seq = 0  # the trace's seq when that batch was taken
        self._guard = InterruptGuard()
        self.run_id = distributed.broadcast_object(uuid.uuid4().hex)
        """Tells this run from another of the same name (a resumed run keeps its checkpoint's)."""
        self.stop_on_nonfinite_loss = stop_on_nonfinite_loss
        self._throughput_mark = (0, 0.0)
        self.ddp = distributed.DDPModel()
        self._rank_traces: Optional[dict[str, Any]] = None

        self.engine.run_event(Event.INIT)
        self.state.model.to(device)
        self.ddp.wrap(self.state)
        if not self.state.optimizers:
            self.state.optimizers = [torch.optim.SGD(self.state.model.parameters(), lr=DEFAULT_LR, momentum=0.9)]
        self.engine.run_event(Event.BEFORE_LOAD)
        if load_path is not None:
            self._load(load_path)
        self.engine.run_event(Event.AFTER_LOAD)
        if self.checkpoint_saver is not None:
            self.checkpoint_saver.claim(self.run_id, run_name)

    # -- views --------------------------------------------------------------------------------
    @property
    def trace(self) -> Trace:
        """The engine's trace of this run."""
        return self.engine.trace

    @property
    def metrics(self) -> Any:
        """The logged metrics: a tidy DataFrame (``batch``, ``epoch``, ``phase``, ``name``, ``value``)."""
        return self.logger.metrics

    def _rank_share(self, dataloader: Any, name: str, seed: int) -> Any:
        """What this rank reads of ``dataloader``: its shard under torchrun, unless the dataloaders
        come sharded (``shard_dataloaders=False``)."""
        return distributed.shard_dataloader(dataloader, name, seed) if self.shard_dataloaders else dataloader

    @property
    def checkpoints(self) -> list:
        """Paths of the checkpoints written so far."""
        return list(self.checkpoint_saver.saved) if self.checkpoint_saver else []

    @property
    def rank_traces(self) -> dict[str, Any]:
        """The trace's ``events``, ``invocations`` and ``notes`` with a leading ``rank`` column. On
        rank 0 of a torchrun launch: every rank's, gathered at the end of the last :meth:`fit`
        (or by :meth:`gather_traces`); elsewhere: this process's own."""
        if self._rank_traces is not None:
            return self._rank_traces
        return distributed.rank_frames(self.trace, self.state.rank)

    def gather_traces(self) -> dict[str, Any]:
        """Gather every rank's trace on rank 0 now and return :attr:`rank_traces`; under torchrun
        every rank must call it (``fit`` does, at its end)."""
        self._rank_traces = distributed.gather_traces(self.trace)
        return self.rank_traces

    # -- fit ------------------------------------------------------------------------------------
    def fit(self, duration: Union[str, Time, None] = None) -> None:
        """Train until ``max_duration``; ``duration`` trains that much more (and extends
        ``max_duration``), so ``fit`` can be called again to continue."""
        state, run = self.state, self.engine.run_event
        if duration is not None:
            state.max_duration = _extended(state.max_duration, state.timestamp, duration)
        with self._guard, self.engine.running():
            try:
                run(Event.FIT_START)
                self._throughput_mark = (state.timestamp.sample, time.perf_counter())
                while not self._reached_max_duration():
                    self._train_epoch()
                run(Event.FIT_END)
                self._rank_traces = distributed.gather_traces(self.trace)
            except BaseException as err:
                self._after_failure(err)
                raise

    def _after_failure(self, err: BaseException) -> None:
        """Leave the trainer consistent after ``err`` ended a fit: a batch in flight is not
        applied (gradients cleared, kept to train again); the trace notes what happened."""
        state = self.state
        applied = self._in_flight is None
        if not applied:
            for optimizer in state.optimizers:
                optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler = fresh_grad_scaler(self.scaler, state.device)
            state.microbatch = None
        event = self.engine.event.value if self.engine.event is not None else None
        self.trace.note(*failure_note(err, event, state.timestamp, applied), state.timestamp)

    def _reached_max_duration(self) -> bool:
        duration = self.state.max_duration
        return self.state.timestamp.get(duration.unit) >= duration.value

    def _train_epoch(self) -> None:
        state, run = self.state, self.engine.run_event
        if not self._epoch_started and state.timestamp.batch_in_epoch == 0:
            self._restore_resumed_rng()
            run(Event.EPOCH_START)
        self._epoch_started = True
        batches = self._epoch_batches()
        device = state.device
        per_epoch = state.dataloader_len
        by_epoch = state.max_duration.unit is TimeUnit.EPOCH
        while True:
            run(Event.BEFORE_DATALOADER)
            batch = self._in_flight
            if batch is None:
                try:
                    batch = next(batches, None)
                except BaseException:
                    # A batch that failed to load is not skipped: the next fit opens this epoch's
                    # iterator again, past the batches trained (a DataLoader's iterator would go on
                    # to the next batch, a generator that raised is finished).
                    self._batches = None
                    raise
            if batch is None:
                break
            self._in_flight, self._batch_seq = batch, self.trace.seq
            state.batch = move_to_device(batch, device)
            run(Event.AFTER_DATALOADER)
            samples = batch_size(state.batch)
            run(Event.BATCH_START)
            self._train_batch(samples)
            run(Event.BATCH_END)
            if self.eval_dataloader is not None and self.eval_interval.due_after_batch(state.timestamp):
                self._evaluate()
            run(Event.BATCH_CHECKPOINT)
            epoch_done = per_epoch is not None and state.timestamp.batch_in_epoch >= per_epoch
            if not by_epoch and not epoch_done and self._reached_max_duration():
                return  # stop mid-epoch; the next fit continues this epoch
        self._batches, self._epoch_started = None, False
        if state.timestamp.batch_in_epoch == 0:
            raise ValueError("train_dataloader yielded no batches this epoch; give it at least one batch "
                             "(check the dataset's length, batch_size and drop_last)")
        self._log_throughput()
        state.timestamp = state.timestamp.to_next_epoch()
        run(Event.EPOCH_END)
        if self.eval_dataloader is not None and self.eval_interval.due_after_epoch(state.timestamp):
            self._evaluate()
        run(Event.EPOCH_CHECKPOINT)

    def _epoch_batches(self) -> Any:
        """This epoch's batch iterator; a resumed epoch skips the batches already trained.
        Creating it leaves the global generators as they were."""
        if self._batches is None:
            state = self.state
            with preserved_rng():
                seed_epoch_shuffle(state.dataloader, state.seed, state.timestamp.epoch, state.rank)
                batches = iter(state.dataloader)
                for _ in range(state.timestamp.batch_in_epoch):
                    next(batches, None)
            self._batches = batches
            self._restore_resumed_rng()
        return self._batches

    def _restore_resumed_rng(self) -> None:
        """Give the generators the checkpoint's states, once, where the saving run went on from
        them: before the first batch trained (after the skipped ones were read, and what
        AFTER_LOAD and FIT_START drew), as Composer does."""
        if self._resumed_rng is not None:
            self.state.load_generator_states(self._resumed_rng["generators"])
            load_rng_state(self._resumed_rng["rng"])
            self._resumed_rng = None

    def _train_batch(self, samples: int) -> None:
        """Forward, loss and backward per microbatch, then the optimizer step."""
        state, run, adapter, scaler, ddp = self.state, self.engine.run_event, self.adapter, self.scaler, self.ddp
        run(Event.BEFORE_TRAIN_BATCH)
        for optimizer in state.optimizers:
            optimizer.zero_grad(set_to_none=True)
        full_batch = state.batch
        size = self.microbatch_size
        microbatches = [full_batch] if size is None or size >= samples else split_batch(full_batch, size)
        last, several = len(microbatches) - 1, len(microbatches) > 1
        create_graph = False
        for algorithm in state.algorithms:  # (a loop, not any(...): no generator frame each batch)
            if algorithm.backwards_create_graph:
                create_graph = True
                break
        precision = state.precision_context()
        total_loss = None
        for index, microbatch in enumerate(microbatches):
            state.microbatch = index
            state.batch = microbatch
            run(Event.BEFORE_FORWARD)
            if ddp.enabled:
                with precision, ddp.training_forward(state, index == last) as model:
                    state.outputs = adapter.forward(model, state.batch)
            else:
                with precision:
                    state.outputs = adapter.forward(state.model, state.batch)
            run(Event.AFTER_FORWARD)
            run(Event.BEFORE_LOSS)
            with precision:
                state.loss = adapter.loss(state.model, state.outputs, state.batch)
            run(Event.AFTER_LOSS)
            run(Event.BEFORE_BACKWARD)
            loss = state.loss
            if several:
                loss = loss * (batch_size(microbatch) / samples)
            (scaler.scale(loss) if scaler is not None else loss).backward(create_graph=create_graph)
            run(Event.AFTER_BACKWARD)
            if not several:
                total_loss = loss  # the batch's loss (read below, never kept with its graph)
            else:
                total_loss = loss.detach() if total_loss is None else total_loss + loss.detach()
        state.microbatch = None
        if several:
            state.batch = full_batch
        if ddp.enabled:  # (one process: no collectives, nor asking torch.distributed for them)
            total_loss = distributed.mean_over_ranks(total_loss.detach(), samples)  # every rank agrees
            samples = distributed.sum_over_ranks(samples)
        # The loss logged: a float when it is read anyway (one host read, to stop before a
        # non-finite loss reaches the weights), else a detached tensor (no device sync).
        if self.stop_on_nonfinite_loss:
            logged = total_loss.item()
            if not math.isfinite(logged):
                self._stop_nonfinite(logged)
        else:
            logged = total_loss.detach()
        if scaler is not None:
            for optimizer in state.optimizers:
                scaler.unscale_(optimizer)
        run(Event.AFTER_TRAIN_BATCH)
        self._apply_step(samples, logged)

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
            self.logger.log_metrics({"loss/train": loss, "lr": state.optimizers[0].param_groups[0]["lr"]},
                                    phase="fit")
            if (state.timestamp.batch + 1) % THROUGHPUT_EVERY == 0:
                self._log_throughput(samples)
            state.timestamp = state.timestamp.to_next_batch(samples)
            self._in_flight = None
        finally:
            guard.release()

    def _stop_nonfinite(self, value: float) -> None:
        """Raise :class:`NonFiniteLossError` for the non-finite loss ``value``, naming the calls of
        this batch that changed batch, outputs or loss (from the trace)."""
        calls = None
        if self.trace.recording:
            calls = self.trace.invocations
            calls = calls[(calls["seq"] >= self._batch_seq)
                          & calls["changed"].map(lambda fields: bool({"batch", "outputs", "loss"} & set(fields)))]
        ts = self.state.timestamp
        self.trace.note("nonfinite", f"loss {value} at batch {ts.batch}; stopped before the optimizer step", ts)
        raise NonFiniteLossError(nonfinite_loss_message(value, ts, calls))

    def _log_throughput(self, pending: int = 0) -> None:
        """Samples per second since the last mark, from host timings (no device sync)."""
        sample, start = self._throughput_mark
        now = time.perf_counter()
        done = self.state.timestamp.sample + pending - sample
        if done > 0 and now > start:
            self.logger.log_metrics({"throughput/samples_per_sec": done / (now - start)}, phase="fit")
        self._throughput_mark = (self.state.timestamp.sample + pending, now)

    # -- eval -----------------------------------------------------------------------------------
    def eval(self, eval_dataloader: Any = None) -> dict[str, float]:
        """Evaluate now on ``eval_dataloader`` (default: the trainer's), between
        EVAL_STANDALONE_START and EVAL_STANDALONE_END; returns the metrics as floats."""
        dataloader = (self._rank_share(eval_dataloader, "eval_dataloader", self.state.seed)
                      if eval_dataloader is not None else self.eval_dataloader)
        if dataloader is None:
            raise ValueError("eval() needs data: pass Trainer(eval_dataloader=...) or trainer.eval(dataloader)")
        _check_dataloader(dataloader, "eval_dataloader")
        self.engine.run_event(Event.EVAL_STANDALONE_START)
        results = self._evaluate(dataloader)
        self.engine.run_event(Event.EVAL_STANDALONE_END)
        return {name: float(value) for name, value in results.items()}

    def _evaluate(self, dataloader: Any = None) -> dict[str, torch.Tensor]:
        """One evaluation: EVAL_BEFORE_ALL, the eval loop, EVAL_AFTER_ALL."""
        run = self.engine.run_event
        run(Event.EVAL_BEFORE_ALL)
        results = self._eval_loop(dataloader if dataloader is not None else self.eval_dataloader)
        run(Event.EVAL_AFTER_ALL)
        return results

    def _eval_loop(self, dataloader: Any) -> dict[str, torch.Tensor]:
        state, run, adapter, metrics = self.state, self.engine.run_event, self.adapter, self.eval_metrics
        run(Event.EVAL_START)
        metrics.reset()
        model = state.model
        was_training = model.training
        model.eval()
        seen = 0
        try:
            with preserved_rng(), torch.no_grad(), self.engine.running():
                for batch in dataloader:
                    state.batch = move_to_device(batch, state.device)
                    run(Event.EVAL_BATCH_START)
                    run(Event.EVAL_BEFORE_FORWARD)
                    with state.precision_context():
                        state.outputs = adapter.forward(state.model, state.batch)
                        state.loss = adapter.loss(state.model, state.outputs, state.batch)
                    run(Event.EVAL_AFTER_FORWARD)
                    metrics.update(state.outputs, batch_targets(state.batch), state.loss, batch_size(state.batch))
                    run(Event.EVAL_BATCH_END)
                    seen += 1
        finally:
            model.train(was_training)
        if not seen:
            raise ValueError("eval_dataloader yielded no batches; give it at least one batch (check the dataset's "
                             "length, batch_size and drop_last)")
        results = metrics.compute()
        self.logger.log_metrics(results, phase="eval")
        run(Event.EVAL_END)
        return results

    # -- predict --------------------------------------------------------------------------------
    def predict(self, dataloader: Any) -> list:
        """The model's outputs (detached, on the device) for each batch of ``dataloader``."""
        _check_dataloader(dataloader, "dataloader")
        state, run, adapter = self.state, self.engine.run_event, self.adapter
        outputs = []
        model = state.model
        was_training = model.training
        model.eval()
        run(Event.PREDICT_START)
        try:
            with preserved_rng(), torch.no_grad(), self.engine.running():
                for batch in dataloader:
                    state.batch = move_to_device(batch, state.device)
                    run(Event.PREDICT_BATCH_START)
                    run(Event.PREDICT_BEFORE_FORWARD)
                    with state.precision_context():
                        state.outputs = adapter.forward(state.model, state.batch)
                    run(Event.PREDICT_AFTER_FORWARD)
                    outputs.append(state.outputs)
                    run(Event.PREDICT_BATCH_END)
        finally:
            model.train(was_training)
        run(Event.PREDICT_END)
        return outputs

    # -- checkpoints ----------------------------------------------------------------------------
    def checkpoint_payload(self) -> Optional[dict[str, Any]]:
        """Everything a resumed run needs, in types ``torch.load(weights_only=True)`` reads.
        Under torchrun every rank calls it (it gathers each rank's random state) and rank 0,
        which writes the checkpoint, gets the payload; the other ranks get None."""
        rank_rng = distributed.gather_object({"rng": rng_state(), "generators": self.state.generator_states()})
        if rank_rng is None:
            return None
        state, trace = self.state, self.trace
        return {
            "run_name": state.run_name,
            "run_id": self.run_id,
            "seed": state.seed,
            "max_duration": str(state.max_duration),
            "model": state.model.state_dict(),
            "frozen": [name for name, p in state.model.named_parameters() if not p.requires_grad],
            "optimizers": [o.state_dict() for o in state.optimizers],
            "schedulers": [s.state_dict() for s in state.schedulers],
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "timestamp": state.timestamp.state_dict(),
            "rng": rng_state(),
            "generators": state.generator_states(),
            "algorithms": _named_states(state.algorithms, trace),
            "callbacks": _named_states(state.callbacks, trace),
            "metrics": frame_to_bytes(self.metrics),
            "trace": {name: frame_to_bytes(getattr(trace, name)) for name in ("events", "invocations", "notes")},
            **({"rank_rng": rank_rng} if len(rank_rng) > 1 else {}),
        }

    def _load(self, path: Union[str, os.PathLike]) -> None:
        """Restore a checkpoint: weights, optimizers, schedulers, scaler, timestamp, generators,
        algorithm and callback state, and the metrics logged before it."""
        ckpt = load_checkpoint(path, map_location=self.state.device)
        state = self.state
        try:
            state.model.load_state_dict(ckpt["model"])
        except RuntimeError as err:
            raise CheckpointError(f"checkpoint {str(path)!r} does not fit this model ({_state_dict_mismatch(err)}); "
                                  f"build the same model, with the same surgery algorithms, as the run that "
                                  f"wrote it") from None
        for name, parameter in state.model.named_parameters():  # frozen by an algorithm such as LayerFreezing
            if name in ckpt.get("frozen", ()):
                parameter.requires_grad_(False)
        _load_each(state.optimizers, ckpt["optimizers"], "optimizers", path)
        _load_each(state.schedulers, ckpt["schedulers"], "schedulers", path)
        if self.scaler is not None and ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        for algo, saved in _saved_states(state.algorithms, ckpt["algorithms"], self.trace):
            if saved is not None:
                algo.load_state_dict(saved)
            elif algo.required_on_load():
                raise CheckpointError(f"checkpoint {str(path)!r} has no state for {self.trace.label(algo)}, "
                                      f"which needs it to resume; resume with the algorithms the run used")
        for cb, saved in _saved_states(state.callbacks, ckpt.get("callbacks", []), self.trace):
            if saved is not None:
                cb.load_state_dict(saved)
        state.timestamp = Timestamp.from_state_dict(ckpt["timestamp"])
        self.run_id = ckpt.get("run_id", self.run_id)
        self._resumed_rng = distributed.rank_random_state(ckpt)  # restored where the run left off
        self.logger.load_metrics(_unlogged(frame_from_bytes(ckpt["metrics"]), self.metrics))
        self.resumed_from = {"path": str(path),
                             "trace": {k: frame_from_bytes(v) for k, v in ckpt["trace"].items()}}
        ts = state.timestamp
        self.trace.note("load", f"resumed from {path} at epoch {ts.epoch}, batch {ts.batch}", ts)

    # -- run record -----------------------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any]:
        """The settings of this run, as JSON-ready values."""
        state = self.state
        return {
            "run_name": state.run_name,
            "run_id": self.run_id,
            "model": type(state.model).__name__,
            "loss_fn": getattr(state.loss_fn, "__name__", repr(state.loss_fn)) if state.loss_fn else None,
            "max_duration": str(state.max_duration),
            "optimizers": [type(o).__name__ for o in state.optimizers],
            "lr": state.optimizers[0].param_groups[0]["lr"] if state.optimizers else None,
            "schedulers": [type(s).__name__ for s in state.schedulers],
            "algorithms": [describe(a) for a in state.algorithms],
            "passes": [pass_name(p) for p in self.engine.passes],
            "device": str(state.device),
            "precision": state.precision,
            "device_train_microbatch_size": self.microbatch_size,
            "seed": state.seed,
            "eval_interval": str(self.eval_interval.time),
            "batch_size": getattr(state.dataloader, "batch_size", None),  # per rank under torchrun
            "world_size": distributed.get_world_size(),
            "shard_dataloaders": self.shard_dataloaders,
            "trace": self.trace.level,
        }

    def to_run(self) -> Any:
        """This run as a :class:`~composer_lab.trainer.run.Run` (config, trace, metrics)."""
        from composer_lab.trainer.run import Run
        return Run(self.state.run_name, self.config, self.trace, self.metrics, self._rank_traces)

    def close(self) -> None:
        """Close the callbacks (progress bar, files)."""
        self.engine.close()


def _extended(max_duration: Time, ts: Timestamp, duration: Union[str, Time]) -> Time:
    """``max_duration`` moved to ``duration`` past the current timestamp."""
    more = ensure_time(duration, "duration")
    if more.unit is TimeUnit.DURATION:
        raise ValueError(f"duration: fit({str(more)!r}) needs an amount to train, in epochs, batches or samples, "
                         f"e.g. fit('1ep')")
    return Time(ts.get(more.unit) + more.value, more.unit)


def _check_dataloader(dataloader: Any, name: str) -> None:
    if dataloader is None or not hasattr(dataloader, "__iter__"):
        raise TypeError(f"{name} must be an iterable of batches such as a torch DataLoader, got "
                        f"{type(dataloader).__name__} {dataloader!r}; wrap your dataset, e.g. "
                        f"DataLoader(dataset, batch_size=64)")
    try:
        length = len(dataloader)
    except TypeError:
        return
    if length == 0:
        raise ValueError(f"{name} is empty (0 batches); give it data, or lower batch_size / set "
                         f"drop_last=False if the dataset is smaller than one batch")


def _check_items(items: Any, cls: type, name: str, expected: str) -> list:
    """``items`` (one object or a sequence of them) as a list of ``cls`` instances."""
    if items is None:
        return []
    if isinstance(items, (cls, str, type)):
        items = [items]
    elif not isinstance(items, Iterable):
        raise TypeError(f"{name} must be a list of objects, each {expected}; got {type(items).__name__} {items!r}")
    items = list(items)
    for i, item in enumerate(items):
        if isinstance(item, type) and issubclass(item, cls):
            raise TypeError(f"{name}[{i}] is the class {item.__name__}, not an instance; write {item.__name__}(...)")
        if not isinstance(item, cls):
            raise TypeError(f"{name}[{i}] is {type(item).__name__} {item!r}; each entry must be {expected}"
                            f"{_by_name_hint(item) if cls is Algorithm else ''}")
    return items


def _by_name_hint(item: Any) -> str:
    """For an algorithm given by its command-line name, how to make the instance."""
    from composer_lab.algorithms import ALGORITHMS
    if isinstance(item, str) and item in ALGORITHMS:
        return (f" (for the name {item!r}: {ALGORITHMS[item].__name__}() from composer_lab.algorithms, or "
                f"ALGORITHMS[{item!r}]())")
    return ""


def _check_microbatch_size(size: Any) -> Optional[int]:
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"device_train_microbatch_size must be a positive integer (examples per microbatch) "
                        f"or None for whole batches, got {type(size).__name__} {size!r}; e.g. "
                        f"device_train_microbatch_size=16")
    if size < 1:
        raise ValueError(f"device_train_microbatch_size must be a positive integer (examples per microbatch) "
                         f"or None for whole batches, got {size!r}")
    return size


def _state_dict_mismatch(err: RuntimeError) -> str:
    """The first lines of ``load_state_dict``'s error that say what differs (missing or
    unexpected keys, shape mismatches), without its header."""
    lines = [line.strip().rstrip(".") for line in str(err).splitlines()[1:] if line.strip()]
    summary = "; ".join(lines[:3]) + ("; ..." if len(lines) > 3 else "")
    return summary if len(summary) < 600 else summary[:600] + " ..."


def _named_states(objs: Sequence[Any], trace: Trace) -> list[dict[str, Any]]:
    """The state of each algorithm or callback under its name in the trace ('LabelSmoothing',
    'LabelSmoothing#2'), so a resumed run matches states by name, not by position."""
    return [{"name": trace.label(obj), "cls": type(obj).__name__, "state": obj.state_dict()} for obj in objs]


def _saved_states(objs: Sequence[Any], entries: list, trace: Trace) -> list[tuple[Any, Optional[dict]]]:
    """Each of ``objs`` with the state :func:`_named_states` saved under its name, or None (the
    lists may differ: a resumed run without a progress bar, callbacks in another order).
    Entries of the older positional format, without names, match nothing."""
    saved = {entry["name"]: entry["state"] for entry in entries if "name" in entry and "state" in entry}
    return [(obj, saved.get(trace.label(obj))) for obj in objs]


def _unlogged(history: Any, logged: Any) -> Any:
    """The rows of ``history`` (a checkpoint's metrics) at a (batch, epoch, phase, name) that
    ``logged`` (this run's, before the load: INIT's) has not, so each is kept once however
    often a run is resumed."""
    keys = ["batch", "epoch", "phase", "name"]
    seen = set(logged[keys].astype(object).itertuples(index=False, name=None))
    fresh = [key not in seen for key in history[keys].astype(object).itertuples(index=False, name=None)]
    return history[fresh]


def _load_each(objects: list, states: list, name: str, path: Any) -> None:
    if len(objects) != len(states):
        raise CheckpointError(f"checkpoint {str(path)!r} holds {len(states)} {name} but the trainer has "
                              f"{len(objects)}; pass the same {name} as the run that wrote it")
    for obj, obj_state in zip(objects, states):
        obj.load_state_dict(obj_state)
