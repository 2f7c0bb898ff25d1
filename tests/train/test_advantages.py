"""Advantage and return estimators against numbers worked out by hand (arithmetic in the comments)."""

import numpy as np
import pytest

from ttlearn.train.advantages import (
    attempt_rewards,
    cross_episode_returns,
    discounted_score_terms,
    gigpo_advantages,
    group_advantages,
    grpo_episode_advantages,
    released_gigpo_advantages,
    released_step_returns,
    turn_level_advantages,
)

EPS = 1e-4


class TestGroupAdvantages:
    REWARDS = (1.0, 2.0, 3.0, 5.0, 5.0)
    GROUPS = ("a", "a", "a", "b", "b")

    def test_group_scale(self):
        # group a: mean 2, std = sqrt((1 + 0 + 1) / 2) = 1 → (−1, 0, 1) / 1.0001
        # group b: mean 5, std 0 → 0 / 1e-4 = 0
        a = group_advantages(self.REWARDS, self.GROUPS, scale="group")
        np.testing.assert_allclose(a, [-1 / 1.0001, 0, 1 / 1.0001, 0, 0], atol=1e-12)

    def test_batch_scale_divides_by_the_batch_std(self):
        # batch mean 3.2, squared deviations 4.84 + 1.44 + 0.04 + 3.24 + 3.24 = 12.8, / (5 − 1) = 3.2 → std √3.2
        # centring stays per group: group a → (−1, 0, 1), group b → (0, 0)
        a = group_advantages(self.REWARDS, self.GROUPS, scale="batch")
        s = np.sqrt(3.2) + EPS
        np.testing.assert_allclose(a, [-1 / s, 0, 1 / s, 0, 0], atol=1e-12)

    def test_none_scale_only_centres(self):
        np.testing.assert_allclose(group_advantages(self.REWARDS, self.GROUPS, scale="none"), [-1, 0, 1, 0, 0])

    def test_singleton_group_gets_zero_not_nan(self):
        # group 0 = {4}: std of one sample taken as 0 → A = 0; group 1 = {1, 3}: mean 2, std √2
        a = group_advantages([4.0, 1.0, 3.0], [0, 1, 1])
        np.testing.assert_allclose(a, [0.0, -1 / (np.sqrt(2) + EPS), 1 / (np.sqrt(2) + EPS)], atol=1e-12)

    def test_bad_input(self):
        with pytest.raises(ValueError, match="scale"):
            group_advantages([1.0, 2.0], [0, 0], scale="std")
        with pytest.raises(ValueError, match="groups has 1 entries"):
            group_advantages([1.0, 2.0], [0])
        with pytest.raises(ValueError, match="finite"):
            group_advantages([1.0, float("nan")], [0, 0])
        with pytest.raises(ValueError, match="hashable"):
            group_advantages([1.0, 2.0], [[0], [0]])


class TestTurnLevelAdvantages:
    # G = 3 rollouts of one sequence, T = 2 turns
    REWARDS = ((1.0, 0.0), (0.0, 0.0), (2.0, 3.0))

    def test_normalises_each_turn_across_rollouts(self):
        # turn 0: (1, 0, 2), mean 1, std sqrt((0 + 1 + 1) / 2) = 1 → (0, −1, 1) / 1.0001
        # turn 1: (0, 0, 3), mean 1, std sqrt((1 + 1 + 4) / 2) = √3 → (−1, −1, 2) / (√3 + 1e-4)
        a = turn_level_advantages(self.REWARDS)
        s = np.sqrt(3) + EPS
        np.testing.assert_allclose(a, [[0, -1 / s], [-1 / 1.0001, -1 / s], [1 / 1.0001, 2 / s]], atol=1e-12)

    def test_batch_scale(self):
        # all six rewards: mean 1, squared deviations 0 + 1 + 1 + 1 + 1 + 4 = 8, / 5 = 1.6; centring stays per turn
        s = np.sqrt(1.6) + EPS
        np.testing.assert_allclose(
            turn_level_advantages(self.REWARDS, scale="batch"), [[0, -1 / s], [-1 / s, -1 / s], [1 / s, 2 / s]]
        )

    def test_needs_a_matrix(self):
        with pytest.raises(ValueError, match="2-dimensional"):
            turn_level_advantages([1.0, 2.0])


class TestCrossEpisodeReturns:
    def test_discounts_inside_and_across_attempts_and_credits_the_reflection(self):
        # attempt 0: rewards −0.1, −1; a reflection; attempt 1: rewards 1, 10. γ_step = 0.95, γ_traj = 0.6.
        # G4 = 10; G3 = 1 + 0.95·10 = 10.5; reflection G2 = G3 = 10.5 (undiscounted);
        # attempt 0 gets 0.6·G3 = 6.3 at every step: G1 = −1 + 6.3 = 5.3; G0 = (−0.1 + 0.95·(−1)) + 6.3 = 5.25
        # (the old chain discounted the later attempts' credit once more by γ_step: G0 = −0.1 + 0.95·5.3 = 4.935)
        g = cross_episode_returns(
            [-0.1, -1.0, 0.0, 1.0, 10.0],
            attempts=[0, 0, 0, 1, 1],
            is_reflection=[False, False, True, False, False],
            gamma_step=0.95,
            gamma_traj=0.6,
        )
        np.testing.assert_allclose(g, [5.25, 5.3, 10.5, 10.5, 10.0])

    def test_boundary_without_reflection_uses_gamma_traj(self):
        # same rewards (1, 2): one attempt → 1 + 0.95·2 = 2.9; two attempts → 1 + 0.6·2 = 2.2
        np.testing.assert_allclose(cross_episode_returns([1.0, 2.0], [0, 0]), [2.9, 2.0])
        np.testing.assert_allclose(cross_episode_returns([1.0, 2.0], [0, 1]), [2.2, 2.0])

    def test_three_attempts(self):
        # rewards 0 | 0 | 1 in attempts 0, 1, 2, γ_traj = 0.9: G = (0.81, 0.9, 1)
        np.testing.assert_allclose(cross_episode_returns([0.0, 0.0, 1.0], [0, 1, 2], gamma_traj=0.9), [0.81, 0.9, 1.0])

    def test_minesweeper_trial_first_step_return_is_its_score(self):
        # (2, 2, −0.1), a reflection, (2, 2, 12); γ_step 0.95, γ_traj 0.9.
        # attempt 2: g = 12, 2 + 0.95·12 = 13.4, 2 + 0.95·13.4 = 14.73 (the reflection gets 14.73);
        # attempt 1 adds 0.9·14.73 = 13.257 to its own g = −0.1, 2 − 0.095 = 1.905, 2 + 0.95·1.905 = 3.80975:
        # G = 13.157, 15.162, 17.06675 = R(τ) = 3.80975 + 0.9·14.73 (the old chain gave 15.774 at the first step)
        rewards, attempts = [2.0, 2.0, -0.1, 0.0, 2.0, 2.0, 12.0], [1, 1, 1, 1, 2, 2, 2]
        reflection = [False, False, False, True, False, False, False]
        g = cross_episode_returns(rewards, attempts, reflection, gamma_step=0.95, gamma_traj=0.9)
        np.testing.assert_allclose(g, [17.06675, 15.162, 13.157, 14.73, 14.73, 13.4, 12.0])
        score = discounted_score_terms(rewards, attempts, reflection, gamma_step=0.95, gamma_traj=0.9).sum()
        assert g[0] == pytest.approx(score)

    def test_first_step_return_equals_the_trial_score(self):
        # G_0⁽⁰⁾ = Σₙ γ_trajⁿ Σₜ γ_stepᵗ rₜ⁽ⁿ⁾ for any trial, uneven attempt lengths included
        rng = np.random.default_rng(0)
        for _ in range(20):
            lengths = rng.integers(1, 6, size=rng.integers(1, 4))
            attempts = np.repeat(np.arange(len(lengths)), lengths)
            rewards = rng.normal(size=len(attempts))
            gammas = {"gamma_step": float(rng.uniform()), "gamma_traj": float(rng.uniform())}
            g = cross_episode_returns(rewards, attempts, **gammas)
            assert g[0] == pytest.approx(discounted_score_terms(rewards, attempts, **gammas).sum())

    def test_bad_input(self):
        with pytest.raises(ValueError, match="non-decreasing"):
            cross_episode_returns([1.0, 2.0], [1, 0])
        with pytest.raises(ValueError, match="reflection steps carry no reward"):
            cross_episode_returns([1.0, 2.0], [0, 0], [True, False])
        with pytest.raises(ValueError, match="gamma_traj"):
            cross_episode_returns([1.0], [0], gamma_traj=1.5)
        with pytest.raises(ValueError, match="one entry per reward"):
            cross_episode_returns([1.0, 2.0], [0])


class TestDiscountedTrialScore:
    # The Minesweeper case (γ_step 0.95, γ_traj 0.6): trial A solves on attempt 1 with rewards (2, 12);
    # trial B fails attempt 1 with (2, 2, −0.1), reflects, and solves attempt 2 with (2, 2, 12).
    A = ([2.0, 12.0], [1, 1], [False, False])
    B = ([2.0, 2.0, -0.1, 0.0, 2.0, 2.0, 12.0], [1, 1, 1, 1, 2, 2, 2], [False, False, False, True, False, False, False])

    def test_terms_discount_steps_and_attempts_and_skip_the_reflection(self):
        # B: attempt 1 → 2, 0.95·2 = 1.9, 0.95²·(−0.1) = −0.09025; the reflection 0;
        #    attempt 2 (×0.6) → 0.6·2 = 1.2, 0.6·0.95·2 = 1.14, 0.6·0.95²·12 = 6.498
        terms = discounted_score_terms(*self.B, gamma_step=0.95, gamma_traj=0.6)
        np.testing.assert_allclose(terms, [2.0, 1.9, -0.09025, 0.0, 1.2, 1.14, 6.498])

    def test_a_first_attempt_success_outranks_a_third_attempt_one(self):
        # R(A) = 2 + 0.95·12 = 13.4; R(B) = 3.80975 + 8.838 = 12.64775; mean 13.023875 → A_episode ±0.376125
        # (the plain sums 14 and 19.9 gave A −2.95 and B +2.95: the slower trial was reinforced).
        # Every anchor is distinct, so A_step = 0 and the advantage is the episode term alone.
        terms = np.concatenate([discounted_score_terms(*t, gamma_step=0.95, gamma_traj=0.6) for t in (self.A, self.B)])
        a = gigpo_advantages(terms, np.zeros(9), ["i"] * 9, [0, 0] + [1] * 7, range(9))
        np.testing.assert_allclose(a, [0.376125] * 2 + [-0.376125] * 7)
        plain = gigpo_advantages(self.A[0] + self.B[0], np.zeros(9), ["i"] * 9, [0, 0] + [1] * 7, range(9))
        np.testing.assert_allclose(plain, [-2.95] * 2 + [2.95] * 7)

    def test_with_dense_rewards_a_later_success_can_outscore_an_earlier_one(self):
        # γ_traj 0.9: R(A) = 2 + 0.95·12 = 13.4, R(B) = 3.80975 + 0.9·(2 + 1.9 + 0.95²·12 = 14.73) = 17.06675 > R(A);
        # at γ_traj 0.6 (the released Minesweeper value) R(B) = 12.64775 < R(A)
        def score(trial, gamma_traj):
            return discounted_score_terms(*trial, gamma_step=0.95, gamma_traj=gamma_traj).sum()

        assert score(self.A, 0.9) == pytest.approx(13.4) and score(self.B, 0.9) == pytest.approx(17.06675)
        assert score(self.B, 0.6) == pytest.approx(12.64775)

    def test_bad_input(self):
        with pytest.raises(ValueError, match="gamma_step"):
            discounted_score_terms([1.0], [0], gamma_step=-0.1)
        with pytest.raises(ValueError, match="reflection steps carry no reward"):
            discounted_score_terms([1.0], [0], [True])


class TestGiGPO:
    # instance "i1": trial 0 = steps (s0, s1), trial 1 = steps (s0, s2, s3); instance "i2": trial 0 = one step (s0).
    # Trial ids and the anchor "s0" repeat across instances on purpose: they must not be pooled.
    REWARDS = (0.0, 1.0, 0.0, 1.0, 2.0, 5.0)
    RETURNS = (0.95, 1.0, 2.85, 3.0, 2.0, 5.0)
    GROUPS = ("i1", "i1", "i1", "i1", "i1", "i2")
    TRIALS = (0, 0, 1, 1, 1, 0)
    ANCHORS = ("s0", "s1", "s0", "s2", "s3", "s0")

    def test_episode_plus_step_advantage(self):
        # i1 trial totals 1 and 3, mean over trials (not steps) 2 → A_episode −1 (trial 0), +1 (trial 1)
        # anchor s0 in i1: returns 0.95, 2.85, mean 1.9 → A_step −0.95, +0.95; s1, s2, s3 are singletons → 0
        # i2: a single trial and a single s0 → 0 + 0
        a = gigpo_advantages(self.REWARDS, self.RETURNS, self.GROUPS, self.TRIALS, self.ANCHORS)
        np.testing.assert_allclose(a, [-1.95, -1.0, 1.95, 1.0, 1.0, 0.0], atol=1e-12)

    def test_grpo_variant_normalises_trial_totals(self):
        # i1 totals (1, 3): mean 2, std √2 → ∓1 / (√2 + 1e-4) on every step of the trial; i2 singleton → 0
        a = grpo_episode_advantages(self.REWARDS, self.GROUPS, self.TRIALS)
        s = np.sqrt(2) + EPS
        np.testing.assert_allclose(a, [-1 / s, -1 / s, 1 / s, 1 / s, 1 / s, 0.0], atol=1e-12)

    def test_bad_input(self):
        with pytest.raises(ValueError, match="returns has 2 entries, expected 1"):
            gigpo_advantages([1.0], [1.0, 2.0], [0], [0], ["s"])
        with pytest.raises(ValueError, match="anchors has 2 entries"):
            gigpo_advantages([1.0], [1.0], [0], [0], ["s", "t"])
        with pytest.raises(ValueError, match="trials has 0 entries"):
            grpo_episode_advantages([1.0], [0], [])


class TestReleasedFormula:
    """LaMer's released code (mlbio-epfl/LaMer 9a4756c) against the paper, on the Minesweeper pair of
    docs/estimators.md: trial A = (2, 12) solved at once, trial B = (2, 2, −0.1) | reflection | (2, 2, 12);
    γ_step 0.95, γ_traj 0.9."""

    A = ([2.0, 12.0], [0, 0], [False, False])
    B = ([2.0, 2.0, -0.1, 0.0, 2.0, 2.0, 12.0], [0, 0, 0, 0, 1, 1, 1], [False, False, False, True, False, False, False])
    GAMMAS = {"gamma_step": 0.95, "gamma_traj": 0.9}

    def test_the_released_chain_discounts_later_attempts_once_more(self):
        # attempt 2: 12, 2 + 0.95·12 = 13.4, 2 + 0.95·13.4 = 14.73 (the reflection takes 14.73);
        # then one chain: −0.1 + 0.9·14.73 = 13.157, 2 + 0.95·13.157 = 14.49915, 2 + 0.95·14.49915 = 15.7741925
        # (the paper's return adds 0.9·14.73 at every step of attempt 1: 17.06675, 15.162, 13.157)
        g = released_step_returns(*self.B, **self.GAMMAS)
        np.testing.assert_allclose(g, [15.7741925, 14.49915, 13.157, 14.73, 14.73, 13.4, 12.0])
        assert cross_episode_returns(*self.B, **self.GAMMAS)[0] == pytest.approx(17.06675)
        # inside one attempt both are the plain γ_step return: (2, 12) → 13.4, 12
        np.testing.assert_allclose(released_step_returns(*self.A, **self.GAMMAS), [13.4, 12.0])
        np.testing.assert_allclose(cross_episode_returns(*self.A, **self.GAMMAS), [13.4, 12.0])

    def test_each_step_is_scored_by_its_own_attempts_undiscounted_reward(self):
        # attempt 1: 2 + 2 − 0.1 = 3.9; the reflection 0; attempt 2: 2 + 2 + 12 = 16
        np.testing.assert_allclose(attempt_rewards(*self.B), [3.9, 3.9, 3.9, 0.0, 16.0, 16.0, 16.0])
        with pytest.raises(ValueError, match="reflection steps carry no reward"):
            attempt_rewards([1.0], [0], [True])

    def test_released_gigpo_against_the_papers(self):
        # E over the group's 9 steps: 14, 14 | 3.9 ×3, 0, 16 ×3 → sum 87.7, mean 9.744444…
        # A_episode = 4.255556 (A) | −5.844444 (attempt 1 of B), −9.744444 (reflection), 6.255556 (attempt 2 of B).
        # Anchor "start" joins A's first step (G 13.4) and B's (G 15.7741925): mean 14.58709625 → ∓1.18709625;
        # the other anchors are singletons (0).
        e = np.r_[attempt_rewards(*self.A), attempt_rewards(*self.B)]
        g = np.r_[released_step_returns(*self.A, **self.GAMMAS), released_step_returns(*self.B, **self.GAMMAS)]
        anchors = [
            (0, "start"),
            (0, "a1"),
            (0, "start"),
            (0, "b1"),
            (0, "b2"),
            "reflection",
            (1, "start"),
            (1, "b4"),
            (1, "b5"),
        ]
        released = released_gigpo_advantages(e, g, ["i"] * 9, anchors)
        np.testing.assert_allclose(
            released,
            [
                3.06845931,
                4.25555556,
                -4.65734819,
                -5.84444444,
                -5.84444444,
                -9.74444444,
                6.25555556,
                6.25555556,
                6.25555556,
            ],
        )
        # the paper: R(A) = 13.4, R(B) = 17.06675, mean 15.233375 → A_episode ∓1.833375; the start anchor compares
        # 13.4 with 17.06675 → ∓1.833375 too: A's first step −3.66675, B's +3.66675
        terms = np.r_[discounted_score_terms(*self.A, **self.GAMMAS), discounted_score_terms(*self.B, **self.GAMMAS)]
        returns = np.r_[cross_episode_returns(*self.A, **self.GAMMAS), cross_episode_returns(*self.B, **self.GAMMAS)]
        paper = gigpo_advantages(terms, returns, ["i"] * 9, ["A"] * 2 + ["B"] * 7, anchors)
        np.testing.assert_allclose(paper[[0, 1, 2]], [-3.66675, -1.833375, 3.66675])

    def test_bad_input(self):
        with pytest.raises(ValueError, match="returns has 1 entries, expected 2"):
            released_gigpo_advantages([1.0, 2.0], [1.0], ["g", "g"], [0, 1])
