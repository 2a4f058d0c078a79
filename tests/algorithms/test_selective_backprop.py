"""Selective Backprop: schedule, selection, errors, BatchNorm, repeatability, the Algorithm."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from composer_lab.algorithms.selective_backprop import (SelectiveBackprop, frozen_norm_statistics,
                                                         select_by_loss_rank, select_using_loss,
                                                         should_selective_backprop)
from composer_lab.core import Event

from algo_helpers import TinyCNN, at_batch, make_state

CE = nn.functional.cross_entropy


# -- the schedule -----------------------------------------------------------------------------
@pytest.mark.parametrize("duration, batch_idx, interrupt, expected", [
    (0.49, 0, 2, False),   # before start
    (0.5, 0, 2, True),     # start is inside
    (0.5, 1, 2, False),    # every 2nd batch of the epoch is plain
    (0.7, 2, 2, True),
    (0.7, 3, 2, False),
    (0.89, 4, 2, True),
    (0.9, 4, 2, False),    # end is outside
    (0.95, 0, 0, False),
    (0.6, 1, 0, True),     # interrupt=0: every batch in the interval
    (0.6, 3, 0, True),
    (0.6, 2, 3, False),    # interrupt=3: batches 2, 5, 8 ... are plain
    (0.6, 1, 3, True),
    (0.6, 5, 3, False),
    (0.6, 0, 1, False),    # interrupt=1: every batch plain
])
def test_should_selective_backprop_truth_table(duration, batch_idx, interrupt, expected):
    assert should_selective_backprop(duration, batch_idx, 0.5, 0.9, interrupt) is expected


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(start=0.9, end=0.5), ValueError, "smaller than end"),
    (dict(start=0.5, end=0.5), ValueError, "smaller than end"),
    (dict(interrupt=-1), ValueError, "interrupt"),
    (dict(interrupt=1.5), TypeError, "interrupt"),
    (dict(current_duration=1.5), ValueError, "current_duration"),
    (dict(start=-0.1), ValueError, "start"),
])
def test_should_selective_backprop_rejects_bad_arguments(kwargs, error, words):
    args = dict(current_duration=0.5, batch_idx=0) | kwargs
    with pytest.raises(error, match=words):
        should_selective_backprop(**args)


# -- select_using_loss ------------------------------------------------------------------------
def test_shapes_for_4d_inputs_with_downsampling(images):
    x, y = images
    new_x, new_y = select_using_loss(x, y, TinyCNN(), CE, keep=0.5, scale_factor=0.5)
    assert new_x.shape == (8, 3, 8, 8) and new_y.shape == (8,)


def test_shapes_for_2d_inputs():
    x, y = torch.randn(10, 5), torch.randint(0, 3, (10,))
    new_x, new_y = select_using_loss(x, y, nn.Linear(5, 3), CE, keep=0.3)
    assert new_x.shape == (3, 5) and new_y.shape == (3,)


def test_downsampled_scoring_sees_smaller_inputs(images):
    seen = []
    model = TinyCNN()
    model.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape))
    select_using_loss(*images, model, CE, keep=0.5, scale_factor=0.5)
    assert seen == [torch.Size([16, 3, 4, 4])]


def test_kept_inputs_and_targets_stay_paired():
    y = torch.randperm(32)
    x = y.float().reshape(32, 1, 1).expand(32, 1, 4).clone()  # each input carries its target
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 32))  # scored on inputs scaled to length 2
    new_x, new_y = select_using_loss(x, y, model, CE, keep=0.25, scale_factor=0.5)
    assert torch.equal(new_x[:, 0, 0].long(), new_y)
    assert len(set(new_y.tolist())) == 8  # without replacement


def test_higher_loss_examples_are_kept_more_often():
    n = 20
    logits = torch.zeros(n, 2)
    logits[:, 0] = torch.linspace(4, -4, n)  # target 0: the loss rises with the index
    targets = torch.zeros(n, dtype=torch.long)
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(n)
    for _ in range(2000):
        kept, _ = select_using_loss(torch.arange(n).float(), targets, lambda x: logits, CE, keep=0.25,
                                    generator=gen)
        counts[kept.long()] += 1
    ranks = counts.argsort().argsort().float()
    spearman = torch.corrcoef(torch.stack([ranks, torch.arange(n).float()]))[0, 1]
    assert spearman > 0.95
    assert counts[-5:].sum() > 3 * counts[:5].sum()
    assert counts[:5].sum() > 0  # easy examples are still drawn sometimes


def test_rank_weights_follow_the_documented_formula():
    # With two examples and keep=0.5 (one kept), P(keep the harder) = w1 / (w0 + w1) = 0.75 / 1.0.
    gen = torch.Generator().manual_seed(1)
    losses = torch.tensor([2.0, 1.0])
    hard = sum(int(select_by_loss_rank(losses, 1, 0.5, gen).item() == 0) for _ in range(4000))
    assert abs(hard / 4000 - 0.75) < 0.03


def test_selection_repeats_under_a_seed_and_varies_across_seeds(images):
    model = TinyCNN()
    picks = [select_using_loss(*images, model, CE, generator=torch.Generator().manual_seed(s))[1]
             for s in (3, 3, 4)]
    x_picks = [select_using_loss(*images, model, CE, generator=torch.Generator().manual_seed(s))[0]
               for s in (3, 3)]
    assert torch.equal(picks[0], picks[1]) and torch.equal(x_picks[0], x_picks[1])
    assert not torch.equal(picks[0], picks[2])


def test_scoring_leaves_batchnorm_statistics_untouched(images):
    model = TinyCNN().train()
    before = {k: v.clone() for k, v in model.bn.state_dict().items()}
    select_using_loss(*images, model, CE, scale_factor=0.5)
    for key, value in model.bn.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert model.bn.track_running_stats and model.training
    model(images[0])  # a training forward still updates them
    assert not torch.equal(model.bn.running_mean, before["running_mean"])


def test_frozen_norm_statistics_restores_after_an_error():
    model = TinyCNN()
    with pytest.raises(RuntimeError), frozen_norm_statistics(model):
        raise RuntimeError("boom")
    assert model.bn.track_running_stats


def test_a_torch_loss_module_is_used_per_example_and_left_unchanged(images):
    loss = nn.CrossEntropyLoss()
    new_x, _ = select_using_loss(*images, TinyCNN(), loss, keep=0.5)
    assert new_x.shape[0] == 8 and loss.reduction == "mean"


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(scale_factor=1.5), ValueError, "scale_factor"),
    (dict(keep=0.0), ValueError, "keep"),
    (dict(keep=1.2), ValueError, "keep"),
    (dict(keep=0.05), ValueError, "keeps int"),  # 0.05 * 16 -> 0 examples
    (dict(loss_fun=lambda out, y: CE(out, y)), TypeError, "reduction"),
    (dict(loss_fun="cross_entropy"), TypeError, "callable"),
])
def test_select_using_loss_rejects_bad_arguments(images, kwargs, error, words):
    args = dict(input=images[0], target=images[1], model=TinyCNN(), loss_fun=CE) | kwargs
    with pytest.raises(error, match=words):
        select_using_loss(**args)


def test_downsampling_2d_inputs_is_a_value_error():
    with pytest.raises(ValueError, match="3 to 5 dimensions"):
        select_using_loss(torch.randn(8, 5), torch.zeros(8, dtype=torch.long), nn.Linear(5, 2), CE,
                          scale_factor=0.5)


def test_per_example_loss_of_wrong_shape_is_a_value_error(images):
    with pytest.raises(ValueError, match="one loss per example"):
        select_using_loss(*images, TinyCNN(), lambda o, y, reduction: CE(o, y), keep=0.5)


# -- the Algorithm ----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error", [
    (dict(start=0.8, end=0.2), ValueError), (dict(keep=0), ValueError), (dict(scale_factor=2), ValueError),
    (dict(interrupt=-2), ValueError),
])
def test_algorithm_rejects_bad_arguments(kwargs, error):
    with pytest.raises(error):
        SelectiveBackprop(**kwargs)


def test_loss_without_reduction_is_rejected_at_init(images):
    with pytest.raises(TypeError, match="reduction"):
        make_state(TinyCNN(), images, [SelectiveBackprop()], loss_fn=lambda out, y: CE(out, y))


def test_no_loss_at_all_is_rejected_at_init(images):
    with pytest.raises(TypeError, match="found no loss"):
        make_state(TinyCNN(), images, [SelectiveBackprop()], loss_fn=None)


def test_model_with_its_own_loss_is_supported(images):
    class Composed(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = TinyCNN()

        def forward(self, batch):
            return self.net(batch[0])

        def loss(self, outputs, batch, reduction="mean"):
            return CE(outputs, batch[1], reduction=reduction)

    state, engine = make_state(Composed(), images, [SelectiveBackprop(start=0.0, interrupt=0)], loss_fn=None)
    engine.run_event(Event.AFTER_DATALOADER)
    assert state.batch[0].shape[0] == 8


def test_algorithm_prunes_on_scheduled_steps_and_logs(images):
    sb = SelectiveBackprop(start=0.5, end=0.9, keep=0.25, scale_factor=0.5, interrupt=2)
    state, engine = make_state(TinyCNN(), images, [sb], max_duration="10ba")
    at_batch(state, 6)  # elapsed 0.6, batch_in_epoch 6: selective
    engine.run_event(Event.AFTER_DATALOADER)
    assert state.batch[0].shape[0] == 4 and state.batch[1].shape[0] == 4
    state.batch = images
    at_batch(state, 7)  # interrupting batch
    engine.run_event(Event.AFTER_DATALOADER)
    assert state.batch[0].shape[0] == 16
    at_batch(state, 2)  # before start
    engine.run_event(Event.AFTER_DATALOADER)
    metrics = engine.logger.metrics
    ratios = metrics[metrics.name == "sb/keep_ratio"].value.tolist()
    assert ratios == [0.25, 1.0, 1.0]
    kept = metrics[metrics.name == "sb/loss_kept"].value.item()
    all_ = metrics[metrics.name == "sb/loss_all"].value.item()
    assert kept > 0 and all_ > 0
    invocations = engine.trace.invocations
    changed = invocations[(invocations.event == "after_dataloader") & invocations.matched].changed.tolist()
    assert changed == [("batch",), (), ()]


def test_algorithm_draws_from_the_state_generator(images):
    picks = []
    for seed in (5, 5, 6):
        torch.manual_seed(0)  # same model weights each time
        state, engine = make_state(TinyCNN(), images, [SelectiveBackprop(start=0.0, interrupt=0)], seed=seed)
        torch.manual_seed(seed + 100)  # the global RNG must not matter
        engine.run_event(Event.AFTER_DATALOADER)
        picks.append(state.batch[1])
    assert torch.equal(picks[0], picks[1]) and not torch.equal(picks[0], picks[2])


def test_algorithm_prunes_every_per_example_field_of_a_dict_batch(images):
    x, y = images
    batch = {"input": x, "target": y, "index": torch.arange(16), "meta": "kept as is"}
    state, engine = make_state(TinyCNN(), batch, [SelectiveBackprop(start=0.0, interrupt=0)])
    engine.run_event(Event.AFTER_DATALOADER)
    new = state.batch
    assert new["meta"] == "kept as is" and new["input"].shape[0] == 8
    assert torch.equal(new["target"], y[new["index"]]) and torch.equal(new["input"], x[new["index"]])


def test_algorithm_rejects_a_batch_that_would_keep_nothing():
    batch = (torch.randn(1, 3, 8, 8), torch.zeros(1, dtype=torch.long))
    state, engine = make_state(TinyCNN(), batch, [SelectiveBackprop(start=0.0, interrupt=0)])
    with pytest.raises(ValueError, match="drop_last"):
        engine.run_event(Event.AFTER_DATALOADER)


def test_algorithm_scoring_leaves_batchnorm_untouched(images):
    model = TinyCNN()
    state, engine = make_state(model, images, [SelectiveBackprop(start=0.0, interrupt=0)])
    before = model.bn.running_mean.clone()
    engine.run_event(Event.AFTER_DATALOADER)
    assert torch.equal(model.bn.running_mean, before) and int(model.bn.num_batches_tracked) == 0


def test_integer_per_example_losses_are_selected_and_logged_as_means(images):
    def errors(outputs, targets, reduction="mean"):  # 0/1 per example: an integer loss
        wrong = (outputs.argmax(1) != targets).long()
        return wrong if reduction == "none" else wrong.float().mean()

    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4))
    state, engine = make_state(model, images, [SelectiveBackprop(start=0.0, interrupt=0, scale_factor=1)],
                               loss_fn=errors)
    wrong = errors(model(images[0]), images[1], reduction="none").float()
    engine.run_event(Event.AFTER_DATALOADER)
    metrics = engine.logger.metrics.set_index("name").value
    assert state.batch[0].shape[0] == 8
    assert metrics["sb/loss_all"] == pytest.approx(wrong.mean().item())
    assert 0 <= metrics["sb/loss_kept"] <= 1


def test_per_token_scores_leave_out_the_positions_the_loss_ignores():
    """Per-token losses average over the tokens the loss counts: padding labelled -100 (which
    cross_entropy with reduction='none' scores 0) does not make an example look easy."""
    from composer_lab.algorithms.selective_backprop import per_example_loss_fn, score_examples

    loss = per_example_loss_fn(nn.functional.cross_entropy)
    logits = torch.randn(2, 5, 6)  # (N, classes, tokens)
    targets = torch.randint(0, 5, (2, 6))
    targets[1, 3:] = -100  # the second example: half of it padding
    per_token = nn.functional.cross_entropy(logits, targets, reduction="none")
    scores = score_examples(torch.zeros(2, 6), targets, lambda x: logits, loss, None, 1)
    expected = torch.stack([per_token[0].mean(), per_token[1, :3].mean()])
    torch.testing.assert_close(scores, expected)
    shifted = torch.cat([torch.zeros(2, 1, dtype=torch.long), targets], 1)  # (a causal model's: one label more)
    causal = per_example_loss_fn(lambda outputs, labels, reduction: nn.functional.cross_entropy(
        outputs, labels[..., 1:], reduction=reduction))
    torch.testing.assert_close(score_examples(torch.zeros(2, 6), shifted, lambda x: logits, causal, None, 1), expected)
    full = targets.clamp_min(0)  # (no position ignored: the plain mean)
    torch.testing.assert_close(score_examples(torch.zeros(2, 6), full, lambda x: logits, loss, None, 1),
                               nn.functional.cross_entropy(logits, full, reduction="none").mean(1))
