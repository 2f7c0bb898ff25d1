"""The training progress bar's line."""

from ttlearn.cli.train import headline


def test_a_per_turn_reward_list_shows_its_mean_and_other_values_are_left_out() -> None:
    metrics = {"loss": 0.0194, "reward_mean": [-0.5, 0.25, 0.75], "grad_norm": 0.127, "notes": 96, "eval": {}}
    assert headline(metrics) == "loss 0.0194 reward_mean 0.167 grad_norm 0.127"


def test_the_order_is_the_shown_metrics_order_whatever_the_step_wrote() -> None:
    assert headline({"kl": 0.5, "loss": 1.0, "success_rate": True}) == "loss 1 kl 0.5"
