"""hybridsag.ab's pure parts: arm texts, team-draft interleaving and its credit, the event
store's contract, reports from known events, and the paired statistics against ranx."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from scipy.stats import binomtest

from hybridsag.ab.arms import parse_arms
from hybridsag.ab.events import SqliteEventStore
from hybridsag.ab.interleave import Interleaving, coin_seed, credit, team_draft
from hybridsag.ab.offline import (
    compare_runs,
    compare_verdict,
    format_compare,
    points,
    read_trec,
    write_trec,
)
from hybridsag.ab.report import build_report, chart_png, format_p, format_report
from hybridsag.ab.online import Experiments
from hybridsag.errors import ConfigError, InputError, StoreError
from hybridsag.settings import ExperimentSettings, Settings


def test_arm_texts() -> None:
    arms = parse_arms("sag2,dense,fused:k=30,dense=1.0")
    assert [a.label for a in arms] == ["sag2", "dense", "fused:k=30,dense=1.0"]
    assert arms[0].alone and arms[0].paths == ("sag2",)
    assert not arms[2].alone and arms[2].k == 30.0 and arms[2].weights == {"dense": 1.0}
    both = parse_arms("bm25+title:judge_order=false,title=0.5,sag2:rounds=2")
    assert both[0].paths == ("bm25", "title") and both[0].judge_order is False
    assert both[0].weights == {"title": 0.5} and both[1].rounds == 2
    for bad, words in (
        ("sag2", "at least two"),
        ("sag2,nope", "unknown path 'nope'"),
        ("sag2,fused:x=1", "unknown option 'x'"),
        ("sag2:k=3,bm25", "alone is not fused"),
        ("sag2,sag2", "twice"),
        ("fused:k=abc,bm25", "not a number"),
        ("sag2,missing.trec", "does not exist"),
    ):
        with pytest.raises(InputError, match=words):
            parse_arms(bad)


def test_settings_file_arm(tmp_path: Path) -> None:
    good = tmp_path / "arm.toml"
    good.write_text("[fusion]\nmethod = 'rrf'\nk = 25\n[sag2]\nrounds = 2\n", encoding="utf-8")
    arm = parse_arms(f"bm25,{good}")[1]
    from hybridsag.settings import Settings

    s = arm.settings_for(Settings(data_dir=tmp_path))
    assert s.fusion.k == 25 and s.sag2.rounds == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[chunking]\nmode = 'passage'\n", encoding="utf-8")
    with pytest.raises(InputError, match="may set only"):
        parse_arms(f"bm25,{bad}")


def test_team_draft_follows_the_paper_while_both_rankings_last() -> None:
    rng = random.Random(7)
    for trial in range(300):
        pool = [f"d{i}" for i in range(12)]
        a = rng.sample(pool, rng.randint(0, 8))
        b = rng.sample(pool, rng.randint(0, 8))
        r = team_draft(a, b, limit=10, seed=trial)
        assert len(set(r.items)) == len(r.items) == min(10, len(set(a) | set(b)))
        picks = {"a": 0, "b": 0}
        for i, team in enumerate(r.teams):
            taken = set(r.items[:i])
            left = {t: [x for x in r if x not in taken] for t, r in (("a", a), ("b", b))}
            # the team that picks is its ranking's best item not picked before ...
            assert r.items[i] == left[team][0]
            other = "b" if team == "a" else "a"
            # ... and, while both rankings have items left, the team with fewer picks (a coin
            # when even); once one has none, the other fills
            if left[other]:
                assert picks[team] <= picks[other]
            picks[team] += 1
        assert r == team_draft(a, b, limit=10, seed=trial)  # the seed decides the coins


def test_team_draft_fills_from_the_other_ranking_when_one_runs_out() -> None:
    assert team_draft([], ["y", "z"], limit=10, seed=1) == Interleaving(("y", "z"), ("b", "b"))
    assert team_draft(["x", "y"], [], limit=10, seed=1) == Interleaving(("x", "y"), ("a", "a"))
    assert team_draft(["x"], ["x", "y", "z"], limit=10, seed=1) == Interleaving(
        ("x", "y", "z"), ("a", "b", "b")
    )
    assert team_draft(["a1", "a2", "a3", "a4"], ["b1"], limit=4, seed=1) == Interleaving(
        ("a1", "b1", "a2", "a3"), ("a", "b", "a", "a")
    )
    assert team_draft([], [], limit=10, seed=1) == Interleaving((), ())
    assert team_draft(["x"], ["y", "z"], limit=0, seed=1) == Interleaving((), ())
    # credit is still by the team that picked: a click on a filled result credits its arm
    filled = team_draft(["x"], ["x", "y", "z"], limit=10, seed=1)
    assert credit(filled.teams, [3]) == {"b": 1}
    assert coin_seed("e", "u", "q") == coin_seed("e", "u", "q") != coin_seed("e", "u", "q2")


def test_credit() -> None:
    assert credit(["a", "b", "a"], [1, 3, 3]) == {"a": 2}
    assert credit(["a", "b"], [2]) == {"b": 1}
    with pytest.raises(ValueError, match="outside"):
        credit(["a"], [2])


def test_arms_name_registered_paths(tmp_path: Path) -> None:
    bad = {"name": "e1", "arms": [{"name": "a", "paths": ["nopath"]}, {"name": "b"}]}
    settings = Settings(data_dir=tmp_path / "data", ab={"experiments": [bad]})
    with pytest.raises(ConfigError, match="experiment 'e1', arm 'a': paths"):
        Experiments(settings)
    assert not settings.events_path.exists()  # refused before the event store opened
    with Experiments(Settings(data_dir=tmp_path / "data")) as exps:
        weights = {**bad, "arms": [{"name": "a", "weights": {"nopath": 1.0}}, {"name": "b"}]}
        with pytest.raises(InputError, match="unknown path 'nopath'"):
            exps.define(ExperimentSettings.model_validate(weights))
        assert exps.list() == []  # nothing logged
        assert exps.store.events() == []


def test_event_store_contract(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite3"
    store = SqliteEventStore(path)
    e1 = store.append("experiment", "x", {"action": "define"})
    e2 = store.append("impression", "x", {"results": []}, query_id="q1")
    store.append("feedback", "x", {"kind": "click", "position": 1}, query_id="q1")
    with pytest.raises(StoreError):
        store.append("impression", "x", {"results": []}, query_id="q1")
    assert e1.seq < e2.seq and store.last_seq() == 3
    store.close()
    again = SqliteEventStore(path)
    assert [e.kind for e in again.events(experiment="x")] == ["experiment", "impression", "feedback"]
    assert again.impression("q1") is not None and again.impression("nope") is None
    assert [e.seq for e in again.events(kind="feedback")] == [3]
    again.close()


def _events(experiment: str, rows: list[tuple[str, list[str], list[int]]]) -> list:
    """Impressions (arm, teams per position, clicked positions) as a store would log them."""
    from hybridsag.ab.events import Event

    out, seq = [], 0
    for i, (arm, teams, clicks) in enumerate(rows):
        seq += 1
        body = {
            "arm": arm,
            "query": f"q{i % 5}",
            "results": [{"position": p, "chunk_id": f"c{p}", "team": t} for p, t in enumerate(teams, 1)],
        }
        out.append(Event(seq, 0.0, "impression", experiment, f"id{i}", body))
        for p in clicks:
            seq += 1
            out.append(Event(seq, 0.0, "feedback", experiment, f"id{i}", {"kind": "click", "position": p}))
    return out


def test_interleaving_report_numbers() -> None:
    exp = ExperimentSettings.model_validate(
        {"name": "il", "mode": "interleave", "arms": [{"name": "a"}, {"name": "b"}]}
    )
    teams = ["a", "b", "a", "b"]
    rows = [("interleaved", teams, [1])] * 30 + [("interleaved", teams, [2])] * 10
    rows += [("interleaved", teams, [1, 2])] * 3 + [("interleaved", teams, [])] * 7
    report = build_report(exp, _events("il", rows), alpha=0.05, min_queries=20)
    il = report["interleaving"]
    assert il["wins"] == {"a": 30, "b": 10} and il["ties"] == 3 and il["no_clicks"] == 7
    assert il["deciding_queries"] == 40 and report["queries"] == 50
    assert il["sign_test_p"] == pytest.approx(binomtest(30, 40).pvalue, abs=1e-6)
    assert il["preference"]["a"] == 0.75
    low, high = il["preference"]["ci95"]
    assert low < 0.75 < high
    assert report["winner"] == "a" and report["enough"] is True
    assert report["per_arm"]["a"]["clicks"] == 33 and report["per_arm"]["a"]["mrr"]["mean"] == pytest.approx(33 / 50)
    assert "a is preferred in 30 of 40" in report["summary"]
    few = build_report(exp, _events("il", rows[:6]), alpha=0.05, min_queries=20)
    assert few["enough"] is False and "not enough evidence yet" in few["summary"]


def test_split_report_numbers() -> None:
    exp = ExperimentSettings.model_validate({"name": "s", "arms": [{"name": "x"}, {"name": "y"}]})
    rows = [("x", ["x"] * 3, [1])] * 20 + [("x", ["x"] * 3, [])] * 20
    rows += [("y", ["y"] * 3, [2])] * 10 + [("y", ["y"] * 3, [])] * 30
    report = build_report(exp, _events("s", rows), alpha=0.05, min_queries=10)
    assert report["per_arm"]["x"]["ctr"]["share"] == 0.5
    assert report["per_arm"]["y"]["mrr"]["mean"] == pytest.approx(10 * 0.5 / 40)
    assert report["winner"] == "x" and report["enough"] is True
    comparison = report["comparisons"]["x vs y"]
    assert comparison["difference"] == pytest.approx(0.5 - 0.125)
    assert comparison["p_value"] < 0.001 and comparison["p_bonferroni"] == comparison["p_value"]


def test_a_tiny_p_value_is_a_bound_in_the_text() -> None:
    """``sign test p = 0.0`` and a chart saying ``p = 0`` (issue 28): below 0.0001 it is a bound."""
    assert format_p(0.0) == "p < 0.0001" and format_p(3e-9) == "p < 0.0001"
    assert format_p(0.0312) == "p = 0.0312" and format_p(None) == "p = n/a"
    exp = ExperimentSettings.model_validate(
        {"name": "il", "mode": "interleave", "arms": [{"name": "a"}, {"name": "b"}]}
    )
    rows = [("interleaved", ["a", "b", "a", "b"], [1])] * 200
    report = build_report(exp, _events("il", rows), alpha=0.05, min_queries=20)
    assert report["interleaving"]["sign_test_p"] < 1e-4
    assert "sign test p < 0.0001" in report["summary"]
    text = format_report(report)
    assert "p < 0.0001" in text and "p = 0.0" not in text and "p = 0 " not in text


def test_compare_runs_statistics_and_crosscheck(tmp_path: Path) -> None:
    qrels = {f"q{i}": frozenset({f"g{i}", f"h{i}"}) for i in range(12)}
    good = {q: [f"g{i}", f"h{i}", "x"] for i, q in enumerate(qrels)}
    half = {q: ["x", f"g{i}"] if i % 3 else [] for i, q in enumerate(qrels)}
    out = compare_runs(qrels, {"good": good, "half": half}, n_resamples=2000)
    assert out["arms"]["good"]["recall@5"] == 1.0
    assert out["arms"]["half"]["recall@5"] == pytest.approx(8 * 0.5 / 12, abs=1e-6)
    pair = out["pairs"]["good vs half"]["recall@5"]
    assert pair["wins"] == 12 and pair["losses"] == 0 and pair["ties"] == 0
    assert pair["ci95"][0] <= pair["mean_difference"] <= pair["ci95"][1]
    assert pair["p_bonferroni"] == pytest.approx(min(1.0, pair["p_value"] * 3), abs=1e-6)
    assert all(v == 0 for v in out["crosscheck"]["max_abs_difference_ranx_vs_ours"].values())
    path = tmp_path / "good.trec"
    write_trec(path, good, name="good")
    assert read_trec(path) == good


def _summary(qrels: dict, runs: dict) -> dict:
    """What ``compare_arms`` returns around :func:`compare_runs`, for the table."""
    stats = compare_runs(qrels, runs, n_resamples=500)
    stats.pop("per_query")
    return {"dataset": "toy", "questions": len(qrels), "skipped": {"count": 0, "ids": {}},
            "arms_order": list(runs), **stats}  # fmt: skip


def test_compare_table_points_order_and_verdict() -> None:
    """eval --compare (issue 28): differences in points, no % and no -0.00; the arms in the
    order given, a long TREC path shortened in the table and given whole once; a verdict."""
    assert points(0.0123) == "+1.23" and points(-0.00001) == "0.00" and points(0.0) == "0.00"
    assert points(-0.5) == "-50.00"
    qrels = {f"q{i}": frozenset({f"g{i}"}) for i in range(12)}
    good = {q: [f"g{i}", "x"] for i, q in enumerate(qrels)}
    poor = {q: ["x", f"g{i}"] if i % 2 else ["x"] for i, q in enumerate(qrels)}
    trec = "/srv/experiments/2026-12-01/runs/01-bm25-with-a-long-descriptive-name.trec"
    summary = _summary(qrels, {"sag2": good, trec: poor, "same": good})
    text = format_compare(summary)
    lines = text.splitlines()
    start = lines.index(next(x for x in lines if x.startswith("arm ")))
    rows = lines[start:-2]  # the arms and the pairs (140 columns wide before)
    assert max(len(line) for line in rows) <= 110, max(rows, key=len)
    table = lines[start + 2 :]
    assert [row.split()[0] for row in table[:3]] == ["sag2", "…" + trec[-27:], "same"]
    assert f"  …{trec[-27:]} is {trec}" in lines  # the whole path, once
    pair_rows = [x for x in lines[:-2] if " vs " in x and "nDCG@10" in x]
    assert len(pair_rows) == 3 and not any("%" in x for x in pair_rows)
    assert "-0.00" not in text and "0.00  [0.00, 0.00]" in pair_rows[1]  # sag2 vs same
    verdict = lines[-1]
    assert verdict == compare_verdict(summary) and verdict.startswith("verdict: sag2 leads on nDCG@10")
    assert "0.00 points over same (not significant, Bonferroni p = 1)" in verdict
    assert f"+68.45 points over …{trec[-27:]} (significant, Bonferroni p = " in verdict
    assert len(verdict) < 200 and verdict.endswith("; alpha 0.05")
    tie = _summary(qrels, {"a": good, "b": good})
    assert compare_verdict(tie) == "verdict: no difference: every arm has nDCG@10 100.00"


def test_reports_have_a_running_p_value_and_the_chart_draws_it() -> None:
    """The running p-value (issue 28): the sign test's after each deciding query, Welch's
    after each query of a split; the chart's third panel, every title wrapped, not cut."""
    names = ["a-rather-long-arm-name-for-the-title", "b-another-long-arm-name-here"]
    exp = ExperimentSettings.model_validate(
        {"name": "il", "mode": "interleave", "arms": [{"name": n} for n in names]}
    )
    teams = [names[0], names[1], names[0], names[1]]
    rows = [("interleaved", teams, [1])] * 30 + [("interleaved", teams, [2])] * 10
    report = build_report(exp, _events("il", rows), alpha=0.05, min_queries=20)
    running = report["running_p"]
    assert running["alpha"] == 0.05 and len(running["points"]) == 40
    assert running["points"][-1] == [40, pytest.approx(report["interleaving"]["sign_test_p"])]
    assert running["points"][0] == [1, 1.0]  # one deciding query proves nothing
    split = ExperimentSettings.model_validate({"name": "s", "arms": [{"name": "x"}, {"name": "y"}]})
    rows = [("x", ["x"] * 3, [1])] * 20 + [("x", ["x"] * 3, [])] * 20
    rows += [("y", ["y"] * 3, [2])] * 10 + [("y", ["y"] * 3, [])] * 30
    sreport = build_report(split, _events("s", rows), alpha=0.05, min_queries=10)
    last = sreport["running_p"]["points"][-1]
    assert last == [80, pytest.approx(sreport["comparisons"]["x vs y"]["p_value"])]
    pytest.importorskip("matplotlib")
    import io

    from matplotlib.image import imread

    for r in (report, sreport):
        png = chart_png(r)
        assert imread(io.BytesIO(png)).shape[1] == 1300  # three panels side by side


def test_a_settings_experiment_is_kept_with_its_events(tmp_path: Path) -> None:
    """``ab report NAME`` in a shell without the settings that defined NAME (issue 28): the
    definition was logged with the events, so the report finds it."""
    exp = {"name": "from-settings", "mode": "interleave", "arms": [{"name": "a"}, {"name": "b"}]}
    data = tmp_path / "data"
    with Experiments(Settings(data_dir=data, ab={"experiments": [exp]})) as exps:
        exps.store.append(
            "impression", "from-settings", {"arm": "interleaved", "query": "q", "results": []},
            query_id="q1",
        )  # fmt: skip
        logged = [e.body for e in exps.store.events(kind="experiment")]
    assert logged == [{"action": "define", "definition": ExperimentSettings.model_validate(exp)
                       .model_dump(mode="json"), "source": "settings"}]  # fmt: skip
    with Experiments(Settings(data_dir=data, ab={"experiments": [exp]})) as exps:
        assert len(exps.store.events(kind="experiment")) == 1  # logged once, not per start
        exps.set_active("from-settings", False)
    with Experiments(Settings(data_dir=data)) as bare:  # a new shell, no such settings
        state = bare.get("from-settings")
        assert state.source == "settings" and state.active is False  # the stop replayed
        assert bare.report("from-settings")["queries"] == 1
    changed = {**exp, "arms": [{"name": "a"}, {"name": "c"}]}
    with Experiments(Settings(data_dir=data, ab={"experiments": [changed]})) as exps:
        assert [a.name for a in exps.get("from-settings").definition.arms] == ["a", "c"]
    with Experiments(Settings(data_dir=data)) as bare:  # the last definition logged
        assert [a.name for a in bare.get("from-settings").definition.arms] == ["a", "c"]
