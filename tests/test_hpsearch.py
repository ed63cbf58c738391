"""The Optuna search of Welch Figure 1 (lmstudy.welch.hpsearch): samples, pairing, resume after an
interruption, expected validation performance, figures. Training is replaced by a fake ``run_fn``."""

from __future__ import annotations

import itertools
import threading

import matplotlib.pyplot as plt
import optuna
import pandas as pd
import pytest

from lmstudy.welch import hpsearch
from lmstudy.welch.hpsearch import SearchConfig, SearchSpace, expected_best

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_expected_best_hand_checked():
    # Two draws with replacement from {1, 2, 3}: the 9 pairs have maxima 1,2,3,2,2,3,3,3,3 (sum 22)
    # and minima 1,1,1,1,2,2,1,2,3 (sum 14).
    assert expected_best([1, 2, 3], 2, minimize=False)[0] == pytest.approx(22 / 9)
    assert expected_best([1, 2, 3], 2)[0] == pytest.approx(14 / 9)
    assert expected_best([3, 1, 2], 1)[0] == pytest.approx(2.0)  # one trial: the mean
    # Ties: min of two draws from {1, 1, 2} is 2 only when both are 2 (1/9).
    mean, std = expected_best([1, 1, 2], 2)
    assert mean == pytest.approx(10 / 9)
    assert std == pytest.approx(((8 + 4) / 9 - (10 / 9) ** 2) ** 0.5)


def test_expected_best_equals_brute_force():
    scores = [5.0, 3.5, 3.5, 9.0, 4.25]
    for n in (1, 2, 3):
        draws = list(itertools.product(scores, repeat=n))
        assert expected_best(scores, n)[0] == pytest.approx(sum(min(d) for d in draws) / len(draws))
        assert expected_best(scores, n, minimize=False)[0] == pytest.approx(sum(max(d) for d in draws) / len(draws))
    # More trials can only help.
    curve = [expected_best(scores, n)[0] for n in range(1, 10)]
    assert curve == sorted(curve, reverse=True) and curve[-1] > min(scores)


def test_space_scaling_and_samples():
    space = SearchSpace.for_hidden(256, (2, 3))
    assert space.bounds["nhid"] == (round(650 * 256 / 1150), round(1650 * 256 / 1150))
    assert space.bounds["nlayers"] == (2, 3) and space.bounds["lr"] == (10, 25)
    samples = hpsearch.sample_trials(space, 20, seed=3)
    assert samples == hpsearch.sample_trials(space, 20, seed=3)  # reproducible
    assert samples != hpsearch.sample_trials(space, 20, seed=4)
    for sample in samples:
        assert set(sample) == set(hpsearch.PAPER_BOUNDS)
        for name, (low, high) in space.bounds.items():
            assert low <= sample[name] <= high
        assert isinstance(sample["nhid"], int) and isinstance(sample["nlayers"], int)


def test_both_sides_get_the_same_hyperparameters():
    sample = hpsearch.sample_trials(SearchSpace.for_hidden(64, (1, 2)), 1)[0]
    configs = hpsearch.run_configs({"domain": "news", "emb_size": 8}, sample)
    assert configs["baseline"].embedding == hpsearch.BASELINE and configs["ours"].embedding == hpsearch.OURS
    for field in ("lr", "dropouti", "dropoute", "hidden_size", "n_layers", "dropout", "dropouth", "wdrop"):
        assert getattr(configs["baseline"], field) == getattr(configs["ours"], field)
    assert configs["ours"].hidden_size == sample["nhid"] and configs["ours"].emb_size == 8


class FakeTraining:
    """Stands in for embedding_init.run: a ppl computed from the config; can be told to be interrupted."""

    def __init__(self, interrupt_on_call: int | None = None):
        self.calls: list = []
        self.interrupt_on_call = interrupt_on_call

    def __call__(self, config):
        self.calls.append(config)
        if self.interrupt_on_call is not None and len(self.calls) == self.interrupt_on_call:
            raise KeyboardInterrupt
        ppl = 100 + config.lr + config.hidden_size / 10 - (10 if "pretrained" in config.embedding else 0)
        return {"val_ppl": ppl, "test_ppl": ppl + 1}


def _config(tmp_path, n_trials: int = 3) -> SearchConfig:
    return SearchConfig(study_name="t", n_trials=n_trials, base={"domain": "news"},
                        space=SearchSpace.for_hidden(64, (1, 2)), seed=0, storage=f"sqlite:///{tmp_path / 'o.db'}")


def test_search_resumes_without_repeating_finished_trials(tmp_path):
    config = _config(tmp_path)
    samples = hpsearch.sample_trials(config.space, 3, seed=0)
    # Interrupted during the second sample's first side (call 3: sample 0 took calls 1 and 2).
    first = FakeTraining(interrupt_on_call=3)
    with pytest.raises(KeyboardInterrupt):
        hpsearch.run_search(config, run_fn=first)
    study = hpsearch.load_study(config)
    states = [t.state for t in study.get_trials()]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    # Resume: sample 0 is not trained again; sample 1 is rerun with the same values, then sample 2.
    second = FakeTraining()
    hpsearch.run_search(config, run_fn=second)
    assert [c.lr for c in second.calls] == [samples[1]["lr"]] * 2 + [samples[2]["lr"]] * 2
    table = hpsearch.search_table(hpsearch.load_study(config))
    assert table["sample_index"].tolist() == [0, 1, 2]
    assert table["lr"].tolist() == pytest.approx([s["lr"] for s in samples])
    assert (table["ours_ppl"] < table["baseline_ppl"]).all()
    # A finished search does nothing; raising n_trials adds only the new samples.
    third = FakeTraining()
    hpsearch.run_search(config, run_fn=third)
    assert third.calls == []
    hpsearch.run_search(_config(tmp_path, n_trials=4), run_fn=third)
    assert len(third.calls) == 2 and third.calls[0].lr == hpsearch.sample_trials(config.space, 4)[3]["lr"]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # the other worker's ask/tell stands in for optimize
def test_a_worker_waits_for_the_sample_another_worker_is_training(tmp_path):
    config = _config(tmp_path, n_trials=2)
    samples = hpsearch.sample_trials(config.space, 2, seed=0)
    # The other worker holds sample 1 (RUNNING) and finishes it a moment later.
    other = hpsearch.load_study(config)
    other.enqueue_trial(samples[1], user_attrs={"sample_index": 1})
    held = other.ask()
    finish = threading.Timer(1.0, lambda: other.tell(held, [150.0, 140.0]))
    finish.start()
    this = FakeTraining()
    study = hpsearch.run_search(config, run_fn=this, poll_s=0.1)
    finish.join()
    assert [c.lr for c in this.calls] == [samples[0]["lr"]] * 2  # sample 1 was not trained twice
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.COMPLETE] * 2
    assert hpsearch.search_table(study)["sample_index"].tolist() == [0, 1]


def test_tables_and_figures(tmp_path):
    config = _config(tmp_path, n_trials=4)
    table = hpsearch.search_table(hpsearch.run_search(config, run_fn=FakeTraining()))
    evp = hpsearch.evp_table(table)
    assert len(evp) == 2 * 4 and set(evp["side"]) == {"baseline", "ours"}
    ours = evp[evp["side"] == "ours"]["expected_best_ppl"].tolist()
    assert ours[0] == pytest.approx(table["ours_ppl"].mean()) and ours == sorted(ours, reverse=True)
    best = hpsearch.best_params_table(table)
    assert list(best.columns[:2]) == ["paper tuned (ours)", "paper baseline"] and len(best) == 8
    overrides = hpsearch.best_run_overrides(table)
    assert overrides["ours"]["hidden_size"] == int(table.loc[table["ours_ppl"].idxmin(), "nhid"])
    for figure in (hpsearch.scatter_figure(table), hpsearch.evp_figure(evp)):
        assert isinstance(figure, plt.Figure)
        plt.close(figure)
    assert hpsearch.best_run_overrides(pd.DataFrame()) == {}


def test_search_config_from_presets():
    for scale in ("smoke", "cpu", "paper"):
        config = hpsearch.search_config(scale, storage="sqlite:///:memory:")
        assert config.n_trials >= 3 and config.base["domain"] == "news"
        assert config.space.bounds["nlayers"][0] >= 1
    assert hpsearch.search_config("paper").space.bounds["nhid"] == (650, 1650)


def test_published_search_keeps_its_study_name():
    """The presets spell out the AWD-LSTM regularisation since issue 24; the search's name must not change with
    it (the published cpu search is ``welch-fig1-cpu-9ac0833c``, results/notebooks/01b_...-cpu.ipynb)."""
    from lmstudy.welch.hpsearch import search_config

    assert search_config("cpu").study_name == "welch-fig1-cpu-9ac0833c"
    assert search_config("smoke").study_name == "welch-fig1-smoke-672456f4"
