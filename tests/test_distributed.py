"""Distributed training: ranks from torchrun's environment, a report file per rank, the merged
report in every format, predict mode's NCCL->gloo routing, and real torchrun jobs (gloo on CPU)
through ``syncfree run --nproc-per-node`` and ``torchrun ... -m syncfree run``."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from syncfree.cli import main
from syncfree.distributed import MergedReport, RankInfo, RankReport, read_rank_reports, write_merged, write_rank_report
from syncfree.distributed.merge import SPREAD_AFTER
from syncfree.distributed.rankfiles import claim_merge, complete_run
from syncfree.distributed.ranks import RankEnvironmentError

# The real torchrun jobs (gloo on CPU) run one at a time under pytest-xdist (`make test`: --dist loadgroup): two
# jobs at once, each with a rendezvous and two ranks, crowd a 2-core machine.
pytestmark = pytest.mark.xdist_group("torchrun")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
            "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "MASTER_ADDR", "MASTER_PORT",
            "SYNCFREE_RUN_ID", "SYNCFREE_RANK_MERGE", "SYNCFREE_RANK_REPORT_DIR")


@pytest.fixture(autouse=True)
def no_rank_environment(monkeypatch):
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)


# --------------------------------------------------------------------------- ranks


def torchrun_env(rank: int, world: int = 2, **extra: str) -> dict[str, str]:
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world),
           "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "none",
           "TORCHELASTIC_RESTART_COUNT": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    env.update(extra)
    return env


def test_a_plain_process_is_no_rank():
    assert RankInfo.from_environ({}) is None
    assert RankInfo.from_environ({"RANK": "0"}) is None  # no world


def test_rank_from_torchruns_environment():
    info = RankInfo.from_environ(torchrun_env(1, LOCAL_RANK="1"))
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (1, 2, 1, 2)
    assert (info.node_rank, info.nnodes, info.master_port, info.restart_count) == (0, 1, 29500, 0)
    assert info.agent_pid == os.getppid()  # torchrun's agent started it
    # The static rendezvous has no run id: one node's agent tells two launches apart.
    assert f":{os.getppid()}" in info.run_key
    named = RankInfo.from_environ(torchrun_env(0, TORCHELASTIC_RUN_ID="job-7", TORCHELASTIC_RESTART_COUNT="2"))
    assert named.run_key == "job-7 attempt 2"
    ours = RankInfo.from_environ(torchrun_env(0, SYNCFREE_RUN_ID="abc"))
    assert ours.run_key == "abc attempt 0"
    assert RankInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info


@pytest.mark.parametrize(("env", "message"), [
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' in the environment is not a whole number"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 in the environment is not below WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "at least one rank"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "negative"),
])
def test_a_malformed_rank_environment_is_one_clear_error(env, message):
    with pytest.raises(RankEnvironmentError, match=message.replace("(", r"\(")):
        RankInfo.from_environ(env)


def test_the_cli_says_a_malformed_environment_in_one_line(monkeypatch, tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    monkeypatch.setenv("RANK", "one")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["run", str(script)]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == "syncfree: error: RANK='one' in the environment is not a whole number"
    assert "ran" not in captured.out


def test_a_process_with_rank_variables_not_started_by_torchrun_is_judged_as_any_run(tmp_path):
    # RANK and WORLD_SIZE without torchrun (Kubeflow, AzureML, a SLURM script): the run took itself for a rank, wrote
    # its report to a folder, printed none and exited with the script's 0 though it synced over the budget
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.ones(4, device='cuda')\nfor _ in range(3):\n    x.sum().item()\n")
    env = {key: value for key, value in os.environ.items() if key not in ENV_KEYS}
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", "--budget", "0", "train.py"], cwd=tmp_path,
                          env={**env, "RANK": "0", "WORLD_SIZE": "2"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "train.py:4:5: SF101 `.item()` waits for the GPU (predicted) ×3" in done.stdout, done.stdout
    assert not (tmp_path / "syncfree-ranks").exists()


# --------------------------------------------------------------------------- rank reports


def site(file: str, line: int, count: int, *, kind: str = "item", rule: str | None = "SF101",
         blocked: float | None = None, predicted: bool = True, allowed: bool = False) -> dict:
    return {"file": file, "line": line, "kind": kind, "count": count, "blocked_ms": blocked, "chain": [line],
            "chain_files": [file], "frames": [], "rule": rule, "label": "`.item()`" if kind == "item" else kind,
            "message": "", "predicted": predicted, "allowed": allowed}


def rank_report(rank: int, sites: list[dict], *, world: int = 2, cwd: str = "/job", key: str = "run-1",
                notes: tuple[str, ...] = ("No CUDA device: syncs predicted on CPU stand-ins",), exit_code: int = 0,
                extra_syncs: int = 0, started: float | None = None, mode: str = "predict") -> RankReport:
    info = RankInfo.from_environ(torchrun_env(rank, world, TORCHELASTIC_RUN_ID=key))
    syncs = sum(s["count"] for s in sites) + extra_syncs
    blocked = [s["blocked_ms"] for s in sites if s["blocked_ms"] is not None]
    report = {"mode": mode, "device": {"name": "CPU stand-in"}, "sites": sites, "error": None, "notes": list(notes),
              "totals": {"syncs": syncs, "counted": syncs - sum(s["count"] for s in sites if s["allowed"]),
                         "sites": len(sites), "blocked_ms": sum(blocked) if blocked else None, "wall_ms": 1.0},
              "predict_table": None}
    now = time.time() if started is None else started
    return RankReport(info, report, f"{cwd}/train.py", [], cwd, exit_code, now, now + 1)


def test_rank_reports_round_trip_and_the_newest_run_is_read(tmp_path):
    for rank in range(2):
        write_rank_report(tmp_path, rank_report(rank, [site("/job/train.py", 10, 5)]))
    # An earlier, larger job left a third rank's file in the same folder.
    write_rank_report(tmp_path, rank_report(2, [site("/job/train.py", 10, 9)], world=3, key="old",
                                            started=time.time() - 3600))
    (tmp_path / "rank-00007.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("not a rank report")
    folder = read_rank_reports(tmp_path)
    assert [r.rank.rank for r in folder.reports] == [0, 1]
    assert folder.world_size == 2 and folder.missing_ranks == [] and folder.earlier == 1
    assert len(folder.problems) == 1 and folder.problems[0].startswith("rank-00007.json: ")
    assert folder.reports[0].report["sites"][0]["count"] == 5
    assert not list(tmp_path.glob(".*.tmp"))  # written under a temporary name, renamed into place


def test_the_last_rank_finds_the_run_complete_and_one_rank_claims_the_merge(tmp_path):
    first, second = rank_report(0, []), rank_report(1, [])
    write_rank_report(tmp_path, first)
    assert complete_run(tmp_path, first) is None  # rank 1 has not written yet
    write_rank_report(tmp_path, second)
    run_a, run_b = complete_run(tmp_path, first), complete_run(tmp_path, second)
    assert [r.rank.rank for r in run_a] == [0, 1] == [r.rank.rank for r in run_b]
    # Both ranks found it complete (they finished together): exactly one merges.
    assert [claim_merge(tmp_path, run_a), claim_merge(tmp_path, run_b)] == [True, False]
    # A later job of the same key into the same folder claims its own merge.
    later = [rank_report(0, [], started=time.time() + 5), rank_report(1, [], started=time.time() + 5)]
    assert claim_merge(tmp_path, later) is True


def test_a_stale_file_of_an_earlier_run_does_not_complete_the_run(tmp_path):
    write_rank_report(tmp_path, rank_report(1, [], started=time.time() - 7200))  # same key, two hours old
    mine = rank_report(0, [])
    write_rank_report(tmp_path, mine)
    assert complete_run(tmp_path, mine) is None


# --------------------------------------------------------------------------- the merge


def test_merge_per_rank_counts_divergent_sites_and_totals():
    merged = MergedReport([
        rank_report(0, [site("/job/train.py", 10, 5), site("/job/train.py", 20, 2, kind="format", rule="SF202")]),
        rank_report(1, [site("/job/train.py", 10, 5)], extra_syncs=3),
    ])
    loss, log = merged.sites
    assert (loss.file, loss.line, loss.count, loss.counts) == ("train.py", 10, 10, {0: 5, 1: 5})
    assert not loss.divergent(merged.ranks)
    assert (log.line, log.counts, log.divergent(merged.ranks)) == (20, {0: 2}, True)
    assert [s.line for s in merged.divergent_sites] == [20]
    assert [(t.rank, t.syncs, t.unattributed) for t in merged.totals] == [(0, 7, 0), (1, 8, 3)]
    least, most = merged.extremes()
    assert (least.rank, most.rank) == (0, 1)
    assert merged.most_counted == 8
    assert merged.site_message(log).endswith("[divergent, rank 0 ×2, rank 1 ×0]")
    text = merged.text()
    assert "15 syncs on 2 of 2 ranks at 2 sites (predicted)" in text
    assert "1 divergent site" in text
    # The note every rank has is said once.
    assert text.count("No CUDA device") == 1
    assert "rank 1: 3 syncs outside your code" in text


def test_even_ranks_name_no_most_and_least():
    merged = MergedReport([rank_report(0, [site("/job/t.py", 1, 2)]), rank_report(1, [site("/job/t.py", 1, 2)])])
    assert merged.rank_lines() == ["per rank: rank 0 2 syncs; rank 1 2 syncs"]


def test_one_row_per_line_and_rule_whatever_the_chain():
    first = {**site("/job/t.py", 3, 2), "chain": [10, 3], "chain_files": ["/job/main.py", "/job/t.py"]}
    second = {**site("/job/t.py", 3, 5), "chain": [20, 3], "chain_files": ["/job/main.py", "/job/t.py"]}
    merged = MergedReport([rank_report(0, [first, second]), rank_report(1, [second])])
    assert [(s.file, s.line, s.counts) for s in merged.sites] == [("t.py", 3, {0: 7, 1: 5})]


def test_rules_not_selected_are_left_out_of_sites_and_counts(tmp_path, capsys):
    reports = [rank_report(0, [site("/job/t.py", 1, 4), site("/job/t.py", 2, 1, kind="format", rule="SF202")]),
               rank_report(1, [site("/job/t.py", 1, 4)])]
    merged = MergedReport(reports, selected={"SF202"})
    assert [s.line for s in merged.sites] == [2]
    assert [t.counted for t in merged.totals] == [1, 0]
    assert "1 sync on 2 of 2 ranks at 1 site (predicted); 8 of rules not selected left out" in merged.summary()
    for report in reports:
        write_rank_report(tmp_path, report)
    assert main(["merge", str(tmp_path), "--ignore", "SF101", "--budget", "1"]) == 0
    assert main(["merge", str(tmp_path), "--budget", "1"]) == 1
    with pytest.raises(SystemExit) as stop:  # a typo selects nothing: argparse's usage error
        main(["merge", str(tmp_path), "--select", "SF999"])
    assert stop.value.code == 2
    assert "'SF999' matches no rule code" in capsys.readouterr().err


def test_a_launch_run_again_with_the_same_key_does_not_take_the_earlier_launchs_files(tmp_path):
    # A multi-node job's static rendezvous (the same address and port) run again into one shared folder: its rank 1
    # was killed without a report, and rank 1's file of the earlier launch (no syncs) completed the run, at rank 0's
    # end and in `syncfree merge`: "0 syncs on 2 of 2 ranks", exit 0.
    import dataclasses

    now = time.time()
    for rank in range(2):
        earlier = rank_report(rank, [], key="none")
        write_rank_report(tmp_path, dataclasses.replace(earlier, started=now - 40, finished=now - 30))
    mine = dataclasses.replace(rank_report(0, [site("/job/train.py", 7, 5)], key="none"), started=now, finished=now + 1)
    write_rank_report(tmp_path, mine)
    assert complete_run(tmp_path, mine) is None
    folder = read_rank_reports(tmp_path)
    assert [r.rank.rank for r in folder.reports] == [0] and folder.missing_ranks == [1] and folder.earlier == 1


def test_an_elastic_restart_keeps_the_syncs_of_the_failed_attempt(tmp_path):
    # torchrun --max-restarts: each attempt's rank writes the same file; the attempt that synced and failed was
    # replaced by the next one's, and a job whose second attempt made no sync passed with nothing said.
    import dataclasses

    def attempt(rank: int, number: int, sites: list[dict]) -> RankReport:
        report = rank_report(rank, sites, key="job-7")
        info = RankInfo.from_environ(torchrun_env(rank, 2, TORCHELASTIC_RUN_ID="job-7",
                                                  TORCHELASTIC_RESTART_COUNT=str(number)))
        return dataclasses.replace(report, rank=info)

    for rank in range(2):
        write_rank_report(tmp_path, attempt(rank, 0, [site("/job/train.py", 7, 5)]))
    for rank in range(2):
        write_rank_report(tmp_path, attempt(rank, 1, []))
    folder = read_rank_reports(tmp_path)
    merged = MergedReport(folder.reports)
    assert [t.counted for t in merged.totals] == [5, 5]
    assert [(s.line, s.counts) for s in merged.sites] == [(7, {0: 5, 1: 5})]
    assert "torchrun restarted the job (attempt 1): the 5 syncs of attempt 0 on this rank are counted too" \
        in merged.text()
    # a later job on the same folder and key is no attempt of this one: its own counts
    later = dataclasses.replace(attempt(0, 1, []), started=time.time() + 3600, finished=time.time() + 3601)
    write_rank_report(tmp_path, later)
    assert MergedReport([later]).totals[0].counted == 0


def test_an_elastic_attempt_killed_before_its_report_is_named_and_the_budget_not_judged(tmp_path):
    # torchrun --max-restarts: attempt 0's rank 1 synced 5 times and was killed (OOM, SIGKILL) before its report; the
    # next attempt's file carried nothing of it, and `Budget 1 per rank: kept` passed a rank that synced 6 times
    import dataclasses

    from syncfree.distributed.emit import summary_lines
    from syncfree.distributed.rankfiles import write_rank_start

    def attempt(rank: int, number: int, sites: list[dict], started: float) -> RankReport:
        report = rank_report(rank, sites, key="job-9", started=started)
        info = RankInfo.from_environ(torchrun_env(rank, 2, TORCHELASTIC_RUN_ID="job-9",
                                                  TORCHELASTIC_RESTART_COUNT=str(number)))
        return dataclasses.replace(report, rank=info)

    now = time.time()
    for rank in range(2):
        write_rank_start(tmp_path, attempt(rank, 0, [], now).rank)
    write_rank_report(tmp_path, attempt(0, 0, [], now))  # rank 1 of attempt 0 left none
    for rank in range(2):
        later = attempt(rank, 1, [site("/job/train.py", 12, 1)], now + 2)
        write_rank_start(tmp_path, later.rank)
        write_rank_report(tmp_path, later)
    merged = MergedReport(read_rank_reports(tmp_path).reports)
    assert merged.lost_children == ["rank 1: attempt 0 of the job on this rank began and left no report (killed "
                                    "before it could write one): its syncs are not counted"]
    assert summary_lines(merged, 1)[0].endswith("Budget 1 per rank: not judged (a rank's count lacks syncs it made).")


def test_allowed_syncs_of_rules_not_selected_are_left_out_once():
    # A site a `# syncfree: allow` comment covers is out of the rank's count already; one of a rule left out by
    # --ignore/--select was taken out a second time: 3 counted syncs per rank became 0, and the job passed.
    allowed = site("/job/t.py", 5, 3, kind="format", rule="SF202", allowed=True)
    reports = [rank_report(rank, [allowed, site("/job/t.py", 7, 3)]) for rank in range(2)]
    merged = MergedReport(reports, selected={"SF101"})
    assert [t.counted for t in merged.totals] == [3, 3]
    assert "6 syncs on 2 of 2 ranks at 1 site (predicted)" in merged.summary(), merged.summary()


def test_a_note_only_some_ranks_have_names_them():
    merged = MergedReport([rank_report(0, [], notes=("a", "b")), rank_report(1, [], notes=("a",))])
    assert merged.notes() == ["a", "b (rank 0)"]


def test_blocked_time_ranks_the_sites_and_the_ranks():
    merged = MergedReport([
        rank_report(0, [site("/job/t.py", 1, 1, blocked=1.0, predicted=False),
                        site("/job/t.py", 2, 9, blocked=0.5, predicted=False)], mode="warn"),
        rank_report(1, [site("/job/t.py", 1, 1, blocked=40.0, predicted=False),
                        site("/job/t.py", 2, 9, blocked=0.5, predicted=False)], mode="warn"),
    ])
    assert [s.line for s in merged.sites] == [1, 2]  # 41 ms before 1 ms, whatever the counts
    least, most = merged.extremes()
    assert (least.rank, most.rank) == (0, 1)
    assert "rank 0 ×1 (1.0 ms), rank 1 ×1 (40.0 ms)" in merged.site_message(merged.sites[0])
    assert "blocked 42.0 ms" in merged.summary() and "ranked by blocked time" in merged.summary()


def timed(file: str, line: int, count: int, blocked: float, first: float | None = None,
          phase: str | None = None) -> dict:
    """A measured site as a rank's report carries it: ``first_ms`` (its first call's blocked time)
    and ``phase`` (once, compile) where a report has them."""
    entry = site(file, line, count, blocked=blocked, predicted=False)
    if first is not None:
        entry["first_ms"] = first
    if phase is not None:
        entry["phase"] = phase
    return entry


def warm_up_job() -> MergedReport:
    """On each rank: a setup line paid once (80 ms), a per-step line (4 steps at 15 ms) and a line
    whose first call pays 100 ms of warm-up, then 0.01 ms per step."""
    return MergedReport([rank_report(rank, [
        timed("/job/t.py", 5, 1, 80.0, phase="once"),
        timed("/job/t.py", 20, 4, 60.0, first=15.0),
        timed("/job/t.py", 30, 5, 100.04, first=100.0),
    ], mode="warn") for rank in range(2)])


def test_the_merge_ranks_sites_as_the_reports_do():
    merged = warm_up_job()
    # Recurring sites by their blocked time after the first calls (90 ms, then 0.08 ms over both
    # ranks), the one-off line after them, though each is the larger total (200 ms, 160 ms).
    assert [(s.line, s.phase, s.first_ms) for s in merged.sites] == [(20, None, 30.0), (30, None, 200.0),
                                                                    (5, "once", None)]
    summary = merged.summary()
    assert ("ranked by blocked time after the first call, repeated syncs first; 2 syncs paid once (setup, "
            "compilation), 160.0 ms, and 230.0 ms at the first call of each repeated one.") in summary
    # The layout of every text surface (syncfree.output.text_line).
    assert ("  t.py:5:1: SF101 `.item()` waits for the GPU [rank 0 ×1 (80.0 ms), rank 1 ×1 (80.0 ms)] ×2, blocked "
            "160.0 ms, paid once: the line runs once" in merged.text().splitlines())
    # What the notebook's table and the json carry of it (merged.schema.json).
    sites = merged.to_dict()["sites"]
    assert [(s["line"], s.get("phase"), s.get("first_ms")) for s in sites] == [(20, None, 30.0), (30, None, 200.0),
                                                                               (5, "once", None)]
    assert sites[0]["per_rank"][0] == {"rank": 0, "count": 4, "blocked_ms": 60.0, "first_ms": 15.0}
    assert sites[2]["per_rank"][0] == {"rank": 0, "count": 1, "blocked_ms": 80.0}
    # syncfree merge's formats say it as syncfree run does.
    out = io.StringIO()
    write_merged(merged, "text", out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("t.py:20:1: SF101 ") and "blocked 120.0 ms (first syncs 30.0 ms, then" in lines[0]
    assert lines[2].startswith("t.py:5:1: SF101 ") and lines[2].endswith(", paid once: the line runs once")
    out = io.StringIO()
    write_merged(merged, "json", out)
    entries = json.loads(out.getvalue())
    assert [(e["line"], e.get("phase"), e.get("first_ms"), e.get("first_calls")) for e in entries] == [
        (20, None, 30.0, 2), (30, None, 200.0, 2), (5, "once", None, None)]
    # Frontends without the extension: the one-off row badged.
    from syncfree.distributed.display import merged_data, merged_html

    assert merged_html(merged_data(merged)).count(">once</span>") == 1


def test_a_line_once_on_one_rank_and_recurring_on_another_recurs():
    merged = MergedReport([rank_report(0, [timed("/job/t.py", 5, 1, 80.0, phase="once")], mode="warn"),
                           rank_report(1, [timed("/job/t.py", 5, 3, 30.0, first=20.0)], mode="warn")])
    (line,) = merged.sites
    # The once rank's whole time is paid once, as the recurring rank's first call is.
    assert (line.phase, line.first_ms, line.firsts) == (None, 100.0, 2)
    assert line.rank_key() == (False, True, 0.0, -10.0, -4)


def test_rank_reports_without_first_calls_or_phases_rank_by_blocked_time():
    # Written before phases and first calls were kept: recurring, by their whole blocked time;
    # their merged report has neither and is valid as before.
    pytest.importorskip("jsonschema")
    from syncfree.distributed import display

    old = [rank_report(rank, [site("/job/t.py", 1, 1, blocked=80.0, predicted=False),
                              site("/job/t.py", 2, 4, blocked=60.0, predicted=False)], mode="warn")
           for rank in range(2)]
    merged = MergedReport(old)
    assert [(s.line, s.phase, s.first_ms) for s in merged.sites] == [(1, None, None), (2, None, None)]
    assert merged.summary().endswith(", ranked by blocked time.")
    data = display.merged_data(merged)
    display.validate_merged(data)
    assert all("phase" not in s and "first_ms" not in s for s in data["sites"])
    assert all("first_ms" not in row for s in data["sites"] for row in s["per_rank"])
    # The new fields validate too.
    display.validate_merged(display.merged_data(warm_up_job()))


def test_the_ranks_are_compared_by_their_recurring_sites_after_the_first_calls():
    # Rank 0 saves a checkpoint once (500 ms); rank 1 waits three times longer at every step.
    merged = MergedReport([
        rank_report(0, [timed("/job/t.py", 5, 1, 500.0, phase="once"), timed("/job/t.py", 20, 10, 30.0, first=3.0)],
                    mode="warn"),
        rank_report(1, [timed("/job/t.py", 20, 10, 90.0, first=3.0)], mode="warn"),
    ])
    assert [(t.rank, t.blocked_ms, t.recurring_ms) for t in merged.totals] == [(0, 530.0, 27.0), (1, 90.0, 87.0)]
    least, most = merged.extremes()
    assert (least.rank, most.rank) == (0, 1)
    assert ("  most blocked at recurring sites after their first calls: rank 1 87.0 ms of 90.0 ms; "
            "least: rank 0 27.0 ms of 530.0 ms") in merged.text()
    data = merged.to_dict()
    assert data["extremes"] == {"least": 0, "most": 1} and data["ranks"][1]["recurring_ms"] == 87.0
    # Predict mode (nothing timed) and rank reports without first calls: as before.
    assert all(t.recurring_ms is None for t in MergedReport([rank_report(0, [site("/job/t.py", 1, 2)])]).totals)


def test_many_ranks_compare_a_recurring_site_by_the_time_after_the_first_call():
    # Rank 0's first call pays 80 ms of warm-up; rank 3 waits longest at every further step.
    reports = [rank_report(rank, [timed("/job/t.py", 3, 10, 80.0 + 9 * 1.0 if rank == 0 else
                                        2.0 + 9 * (4.0 if rank == 3 else 1.0),
                                        first=80.0 if rank == 0 else 2.0)], world=6, mode="warn")
               for rank in range(6)]
    merged = MergedReport(reports)
    assert merged.site_message(merged.sites[0]).endswith(
        "; blocked after the first call 9.0 ms (rank 0) to 36.0 ms (rank 3)]")
    # A one-off site's ranks by their whole time.
    once = MergedReport([rank_report(rank, [timed("/job/t.py", 3, 1, 10.0 * (rank + 1), phase="once")], world=6,
                                     mode="warn") for rank in range(6)])
    assert once.site_message(once.sites[0]).endswith("; blocked 10.0 ms (rank 0) to 60.0 ms (rank 5)]")


def test_many_ranks_show_min_median_max():
    reports = [rank_report(r, [site("/job/t.py", 3, 10 + (r == 5) * 7)], world=8) for r in range(8)]
    merged = MergedReport(reports)
    assert len(merged.ranks) > SPREAD_AFTER
    assert merged.site_message(merged.sites[0]).endswith("[min ×10 (rank 0), median ×10, max ×17 (rank 5)]")
    assert "per rank: median 10 syncs" in merged.text()


def test_ranks_with_the_code_in_different_folders_merge_by_relative_path():
    merged = MergedReport([rank_report(0, [site("/node0/repo/train.py", 7, 1)], cwd="/node0/repo"),
                           rank_report(1, [site("/node1/repo/train.py", 7, 1)], cwd="/node1/repo")])
    assert len(merged.sites) == 1 and merged.sites[0].file == "train.py"


def test_missing_and_failed_ranks_are_said():
    merged = MergedReport([rank_report(0, [], world=3), rank_report(2, [], world=3, exit_code=1)], directory="runs")
    problems = merged.problems_text()
    assert "rank 1 of 3 left no report in runs: its syncs are not in this report" in problems
    assert "rank 2 exited with status 1" in problems


def merged_pair() -> MergedReport:
    return MergedReport([
        rank_report(0, [site(str(EXAMPLE), 53, 10), site(str(EXAMPLE), 55, 2, kind="format", rule="SF202")],
                    cwd=str(ROOT)),
        rank_report(1, [site(str(EXAMPLE), 53, 10)], cwd=str(ROOT)),
    ])


def test_json_entries_carry_each_rank_and_the_divergence():
    out = io.StringIO()
    write_merged(merged_pair(), "json", out)
    entries = json.loads(out.getvalue())
    assert [(e["path"], e["line"], e["count"], e["divergent"]) for e in entries] == [
        ("examples/ddp_train.py", 53, 20, False), ("examples/ddp_train.py", 55, 2, True)]
    assert entries[1]["ranks"] == [{"rank": 0, "count": 2, "blocked_ms": None},
                                   {"rank": 1, "count": 0, "blocked_ms": None}]
    assert entries[0]["col"] == 9  # the statement's start on that line of the example


def test_sarif_results_carry_each_rank():
    out = io.StringIO()
    write_merged(merged_pair(), "sarif", out)
    run = json.loads(out.getvalue())["runs"][0]
    assert [r["properties"]["divergent"] for r in run["results"]] == [False, True]
    assert run["results"][0]["properties"]["ranks"][1] == {"rank": 1, "count": 10, "blocked_ms": None}
    assert run["properties"]["worldSize"] == 2
    assert {rule["id"] for rule in run["tool"]["driver"]["rules"]} == {"SF101", "SF202"}


def test_github_annotations_and_text():
    out = io.StringIO()
    write_merged(merged_pair(), "github", out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("::warning file=examples/ddp_train.py,line=55,")
    assert "divergent%2C" not in lines[1] and "[divergent, rank 0 ×2, rank 1 ×0]" in lines[1]
    out = io.StringIO()
    write_merged(merged_pair(), "text", out, budget=5)
    text = out.getvalue()
    assert "examples/ddp_train.py:55:13: SF202" in text
    assert "Budget 5 per rank: exceeded." in text


# --------------------------------------------------------------------------- syncfree merge


def test_merge_command_exit_codes(tmp_path, capsys):
    assert main(["merge", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip() == f"syncfree: error: cannot read {tmp_path / 'nowhere'}: no such folder"
    assert main(["merge", str(tmp_path)]) == 2
    assert "no syncfree rank reports" in capsys.readouterr().err
    for rank in range(2):
        write_rank_report(tmp_path, rank_report(rank, [site("/job/train.py", 10, 3)]))
    assert main(["merge", str(tmp_path)]) == 1  # the default budget, 0 per rank, as syncfree run
    assert main(["merge", str(tmp_path), "--budget", "3"]) == 0
    assert main(["merge", str(tmp_path), "--budget", "2"]) == 1
    assert main(["merge", str(tmp_path), "--exit-zero"]) == 0
    captured = capsys.readouterr()
    assert "6 syncs on 2 of 2 ranks at 1 site (predicted)" in captured.out
    (tmp_path / "rank-00001.json").unlink()
    assert main(["merge", str(tmp_path), "--budget", "9"]) == 2
    assert "syncfree: error: rank 1 of 2 left no report" in capsys.readouterr().err


def test_a_rank_whose_child_left_no_report_is_not_judged(tmp_path, capsys):
    # Rank 1's count lacks the syncs of a child killed before it wrote its report: 0 syncs within a budget of 0 is
    # no pass (as `syncfree run SCRIPT`), and the merge says which rank and child. The note's type survives the file.
    lost = "child process Doomed (pid 4242) ended without a report (killed): its syncs are not counted"
    write_rank_report(tmp_path, rank_report(0, []))
    report = rank_report(1, [])
    report.child_notes, report.lost_children = [lost], [lost]
    write_rank_report(tmp_path, report)
    assert read_rank_reports(tmp_path).reports[1].lost_children == [lost]
    assert main(["merge", str(tmp_path)]) == 1
    assert f"syncfree: could not judge rank 1: {lost}" in capsys.readouterr().err
    assert main(["merge", str(tmp_path), "--exit-zero"]) == 0
    capsys.readouterr()
    # A rank over its budget is named for that, the first reason.
    write_rank_report(tmp_path, rank_report(0, [site("/job/train.py", 10, 3)]))
    assert main(["merge", str(tmp_path), "--budget", "2"]) == 1
    assert "could not judge" not in capsys.readouterr().err


def test_run_rank_keeps_its_lost_children_apart_in_its_report(tmp_path, monkeypatch):
    # End to end on one rank: syncfree run as a torchrun rank forks a child that is killed once its target runs.
    script = tmp_path / "rank.py"
    script.write_text(
        "import multiprocessing, os, signal, time\n"
        "def work(started):\n"
        "    started.set()\n"
        "    time.sleep(60)\n"
        "context = multiprocessing.get_context('fork')\n"
        "started = context.Event()\n"
        "child = context.Process(target=work, args=(started,), name='Doomed')\n"
        "child.start()\n"
        "assert started.wait(60)\n"
        "os.kill(child.pid, signal.SIGKILL)\n"
        "child.join(60)\n")
    env = {**os.environ, **torchrun_env(0, 1, TORCHELASTIC_RUN_ID="lost"), "PYTHONPATH": str(ROOT / "python_helper")}
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", "--rank-report-dir", str(tmp_path / "ranks"),
                           str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr  # a rank exits as its script does; the merge judges
    [report] = read_rank_reports(tmp_path / "ranks").reports
    assert len(report.lost_children) == 1 and "Doomed (pid" in report.lost_children[0], report.child_notes
    assert main(["merge", str(tmp_path / "ranks"), "--budget", "5"]) == 1


# --------------------------------------------------------------------------- predict mode: NCCL on gloo


NCCL_SCRIPT = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("nccl", init_method="file://{store}", rank=0, world_size=1)
assert dist.is_nccl_available() and torch.cuda.is_available()
torch.cuda.set_device(0)
loss = torch.ones(1, device="cuda")
dist.all_reduce(loss)
value = loss.item()
stacked = torch.stack([loss, loss * 2])
dist.all_reduce(stacked)
dist.barrier()
gathered = [None]
dist.all_gather_object(gathered, {{"loss": 1.0}})
work = dist.all_reduce(loss, async_op=True)
work.wait()
dist.destroy_process_group()
print("finished", value, gathered)
"""


def run_predicted(tmp_path, monkeypatch, env: dict[str, str] | None = None):
    from syncfree.script_run import run_script

    script = tmp_path / "nccl_job.py"
    script.write_text(NCCL_SCRIPT.format(store=tmp_path / "store"))
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    return run_script(str(script), mode="predict")


def lines_of(result) -> dict[int, tuple[str, int]]:
    return {s.line: (s.kind, s.count) for s in result.report.sites}


def test_a_script_written_for_nccl_runs_on_gloo_and_its_syncs_are_predicted(tmp_path, monkeypatch, capfd):
    import torch.distributed as dist

    result = run_predicted(tmp_path, monkeypatch)
    assert result.exit_code == 0, result.error
    assert "finished 1.0 [{'loss': 1.0}]" in capfd.readouterr().out
    sites = lines_of(result)
    assert sites[10] == ("item", 1)          # the all-reduced value read on the host
    assert sites[13] == ("distributed", 1)   # barrier: NCCL's waits for the device
    assert 15 in sites                       # the object collective's size reads and copies
    assert 9 not in sites and 12 not in sites and 17 not in sites  # NCCL collectives, wait(): no CPU wait
    assert not result.report.predict_table or not result.report.predict_table.get("unmeasured_calls")
    # Everything is put back.
    assert dist.init_process_group.__module__ == "torch.distributed.distributed_c10d"
    assert dist.barrier is dist.distributed_c10d.barrier and dist.barrier.__name__ == "barrier"
    assert not dist.is_initialized()
    assert not hasattr(dist.Work.wait, "__wrapped__")


def test_blocking_wait_makes_every_collective_a_predicted_sync(tmp_path, monkeypatch):
    result = run_predicted(tmp_path, monkeypatch, {"TORCH_NCCL_BLOCKING_WAIT": "1"})
    assert result.exit_code == 0, result.error
    sites = lines_of(result)
    assert sites[9] == ("distributed", 1) and sites[12] == ("distributed", 1)
    assert sites[17] == ("distributed", 1)  # work.wait()
    assert 16 not in sites                   # async_op=True: the call itself does not wait


# --------------------------------------------------------------------------- real torchrun (gloo on CPU)


def job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python_helper"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    env["NO_COLOR"] = "1"
    return env


def check_merged_example(text: str, steps: int) -> None:
    every_step = (f"examples/ddp_train.py:53:21: SF101 `.item()` waits for the GPU [rank 0 ×{steps}, rank 1 ×{steps}] "
                  f"(predicted) ×{2 * steps}")
    assert every_step in text, text
    assert "examples/ddp_train.py:55:19: SF202 Formatting a CUDA tensor into a string waits for the GPU " \
           "[divergent, rank 0 ×2, rank 1 ×0] (predicted) ×2" in text, text
    assert "1 divergent site (made on some ranks only)" in text
    assert f"per rank: rank 0 {steps + 4 + 2} syncs; rank 1 {steps + 4} syncs" in text
    assert text.count("note: No CUDA device") == 1  # once, not once per rank


def test_syncfree_run_nproc_per_node_launches_torchrun_and_merges(tmp_path):
    steps = 6
    result = subprocess.run(
        [sys.executable, "-m", "syncfree", "run", "--standalone", "--nproc-per-node", "2", str(EXAMPLE),
         "--steps", str(steps), "--log-every", "3"],
        cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=110)
    check_merged_example(result.stdout, steps)
    assert result.stdout.count("syncs on 2 of 2 ranks") == 1
    assert result.returncode == 1, result.stderr  # over the default budget of 0 syncs per rank
    assert "syncfree: error" not in result.stderr


def test_a_ddp_with_find_unused_parameters_is_not_judged_in_predict_mode(tmp_path):
    # Its reducer's copy of the used-parameter map in each backward (SF906) is C++ predict mode does not see: a job
    # that made it passed as "0 syncs on 2 of 2 ranks", exit 0, with nothing said.
    (tmp_path / "ddp.py").write_text(textwrap.dedent("""\
        import os, torch, torch.distributed as dist
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        model = torch.nn.Linear(8, 8).to(torch.device("cuda", rank), non_blocking=True)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank], find_unused_parameters=True)
        model(torch.randn(4, 8, device="cuda")).pow(2).mean().backward()
        dist.destroy_process_group()
        """))
    result = subprocess.run(
        [sys.executable, "-m", "syncfree", "run", "--standalone", "--nproc-per-node", "2", "ddp.py"],
        cwd=tmp_path, env=job_env(), capture_output=True, text=True, timeout=110)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "0 syncs on 2 of 2 ranks" in result.stdout, result.stdout
    assert "syncfree: could not judge rank 0: DistributedDataParallel(find_unused_parameters=True)" in result.stderr


def test_plain_torchrun_ranks_merge_once_and_syncfree_merge_reads_the_folder(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    launcher = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    folder = tmp_path / "ranks"
    steps = 4
    result = subprocess.run(
        [*launcher, "--standalone", "--nproc-per-node", "2", "-m", "syncfree", "run", "--rank-report-dir",
         str(folder), str(EXAMPLE), "--steps", str(steps), "--log-every", "3"],
        cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=110)
    assert result.returncode == 0, result.stderr  # each rank exits as its script: torchrun's verdict
    check_merged_example(result.stdout, steps)
    assert result.stdout.count("syncs on 2 of 2 ranks") == 1  # the last rank merged, once
    assert sorted(p.name for p in folder.glob("rank-*.json")) == ["rank-00000.json", "rank-00001.json"]
    merged = subprocess.run([sys.executable, "-m", "syncfree", "merge", str(folder), "--format", "json"],
                            cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=60)
    assert merged.returncode == 1
    entries = {e["line"]: e for e in json.loads(merged.stdout)}
    assert entries[53]["ranks"] == [{"rank": 0, "count": steps, "blocked_ms": None},
                                    {"rank": 1, "count": steps, "blocked_ms": None}]
    assert entries[55]["divergent"] is True


def test_a_run_of_torchrun_itself_counts_the_ranks_its_library_starts(tmp_path):
    # `syncfree run -m torch.distributed.run ... train.py`: torch's elastic agent starts each rank with subprocess,
    # a library's call, which went through unwatched (on a GPU the ranks' syncs were lost, here their CUDA code
    # failed). A rank is the program's own script run again: followed, its syncs rows of the run's report.
    (tmp_path / "rank.py").write_text("import torch\nx = torch.ones(2, device='cuda')\nx.sum().item()\n")
    result = subprocess.run(
        [sys.executable, "-m", "syncfree", "run", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", "rank.py"], cwd=tmp_path, env=job_env(), capture_output=True, text=True, timeout=110)
    assert result.returncode == 1, result.stderr  # syncs found
    assert re.search(r"^rank.py:3:1: SF101 .*×2, .*\(in child processes rank.py \(pid \d+\), rank.py \(pid \d+\)\)$",
                     result.stdout, re.M), result.stdout


def test_torchrun_options_pass_through_as_torchrun_spells_them():
    import argparse

    from syncfree.cli.launch import add_torchrun_options, torchrun_arguments

    parser = argparse.ArgumentParser()
    add_torchrun_options(parser)
    args = parser.parse_args(["--nproc_per_node", "4", "--nnodes", "1:2", "--rdzv-backend", "c10d",
                              "--rdzv_endpoint", "host:29400", "--rdzv-id", "job", "--master-port", "29501",
                              "--standalone", "--max-restarts", "1"])
    assert torchrun_arguments(args) == [
        "--nproc-per-node", "4", "--nnodes", "1:2", "--master-port", "29501", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "host:29400", "--rdzv-id", "job", "--max-restarts", "1", "--standalone"]
    assert torchrun_arguments(parser.parse_args([])) == []


def test_nproc_per_node_takes_a_number(capsys, tmp_path):
    script = tmp_path / "t.py"
    script.write_text("")
    with pytest.raises(SystemExit) as stop:
        main(["run", "--nproc-per-node", "zero", str(script)])
    assert stop.value.code == 2
    assert "--nproc-per-node takes a number >= 1" in capsys.readouterr().err


def test_torchrun_options_need_a_script(capsys, tmp_path):
    notebook = tmp_path / "n.ipynb"
    notebook.write_text("{}")
    assert main(["run", "--nproc-per-node", "2", str(notebook)]) == 2
    assert capsys.readouterr().err.strip() == "syncfree: error: --nproc-per-node and the other torchrun options run a .py script"


def test_rank_0_says_where_its_report_went_when_another_rank_merges(tmp_path, monkeypatch, capsys):
    script = tmp_path / "train.py"
    script.write_text("import torch\nprint(torch.ones(1, device='cuda').item())\n")
    for key, value in torchrun_env(0, 2).items():
        monkeypatch.setenv(key, value)
    assert main(["run", "--rank-report-dir", str(tmp_path / "ranks"), str(script)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "1.0\n"  # no report of its own: rank 1 has not finished
    assert captured.err.strip() == (f"syncfree: rank 0 wrote its report to {tmp_path / 'ranks'}; the last rank to "
                                    f"finish prints the merged report (syncfree merge {tmp_path / 'ranks'} does too)")


def test_rank_mode_under_a_plain_launch_script(tmp_path, monkeypatch, capsys):
    """One process standing for the last rank of a job of one: it writes its file and merges."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import torch
        x = torch.ones(2, device="cuda")
        print(x.sum().item())
    """))
    for key, value in torchrun_env(0, 1).items():
        monkeypatch.setenv(key, value)
    folder = tmp_path / "ranks"
    assert main(["run", "--rank-report-dir", str(folder), str(script)]) == 0  # the script's status
    captured = capsys.readouterr()
    assert "1 sync on 1 of 1 rank at 1 site (predicted)" in captured.out
    assert f"syncfree merge {folder}" in captured.err
    assert (folder / "rank-00000.json").is_file()


# --------------------------------------------------------------------------- warn mode: the waits debug mode misses


WARN_SCRIPT = """\
import torch
import torch.distributed as dist

def job(store):
    dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
    t = torch.ones(2)
    dist.all_reduce(t)
    dist.barrier()
    work = dist.barrier(async_op=True)
    work.wait()
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    dist.destroy_process_group()
"""


def run_watched(tmp_path, monkeypatch, env: dict[str, str] | None = None):
    import importlib.util

    import syncfree

    path = tmp_path / "warn_job.py"
    path.write_text(WARN_SCRIPT)
    spec = importlib.util.spec_from_file_location("warn_job", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    with syncfree.watch(mode="warn", measure_blocked=False) as watched:
        module.job(str(tmp_path / "store"))
    return {(s.line, s.kind): (s.count, s.label) for s in watched.report.sites}


def as_nccl(monkeypatch):
    """The single-process gloo group answers as an NCCL one (what the wrappers decide by)."""
    import torch.distributed as dist

    monkeypatch.setattr(dist.distributed_c10d, "get_backend", lambda group=None: "nccl")


def test_warn_mode_sees_nccl_barriers_through_explicit_wrappers(fake_cuda, tmp_path, monkeypatch):
    import torch.distributed as dist

    before = (dist.barrier, dist.distributed_c10d.barrier, dist.all_reduce, vars(dist.Work)["wait"])
    as_nccl(monkeypatch)
    sites = run_watched(tmp_path, monkeypatch)
    # The barriers, at the call and at the async one's wait(); NCCL collectives and their
    # wait() without blocking wait: no host wait.
    assert sites == {(8, "distributed"): (1, "`dist.barrier()`"), (10, "distributed"): (1, "`dist.barrier()`")}
    assert (dist.barrier, dist.distributed_c10d.barrier, dist.all_reduce, vars(dist.Work)["wait"]) == before
    from syncfree.capture.debug import explicit_distributed

    assert not explicit_distributed._tagged  # no work kept alive past the run


def test_warn_mode_with_blocking_wait_sees_every_nccl_collective(fake_cuda, tmp_path, monkeypatch):
    as_nccl(monkeypatch)
    sites = run_watched(tmp_path, monkeypatch, {"TORCH_NCCL_BLOCKING_WAIT": "1"})
    assert sites == {(7, "distributed"): (1, "`dist.all_reduce() with TORCH_NCCL_BLOCKING_WAIT`"),
                     (8, "distributed"): (1, "`dist.barrier()`"), (10, "distributed"): (1, "`dist.barrier()`"),
                     (12, "distributed"): (1, "`dist.all_reduce() with TORCH_NCCL_BLOCKING_WAIT`")}


def as_nccl_returning_no_work(monkeypatch):
    """... and, like ProcessGroupNCCL since torch 2.8 (ProcessGroupNCCL.cpp: ``return asyncOp ?
    work : nullptr``), waits inside the call and returns no work without async_op: c10d then
    calls no ``Work.wait()`` (distributed_c10d.py: ``elif work is not None: work.wait()``)."""
    import torch.distributed as dist

    as_nccl(monkeypatch)
    real_wait = dist.Work.wait  # the wait in C++, not the one syncfree wraps
    for name in ("allreduce", "barrier"):
        real = getattr(dist.ProcessGroup, name)

        def call(self, *args, _real=real, **kwargs):
            work = _real(self, *args, **kwargs)
            opts = kwargs.get("opts", args[-1] if args else None)
            if getattr(opts, "asyncOp", True):
                return work
            real_wait(work)
            return None

        monkeypatch.setattr(dist.ProcessGroup, name, call)


def test_warn_mode_sees_a_call_that_waits_inside_and_returns_no_work(fake_cuda, tmp_path, monkeypatch):
    as_nccl_returning_no_work(monkeypatch)
    assert run_watched(tmp_path, monkeypatch) == {(8, "distributed"): (1, "`dist.barrier()`"),
                                                  (10, "distributed"): (1, "`dist.barrier()`")}
    sites = run_watched(tmp_path, monkeypatch, {"TORCH_NCCL_BLOCKING_WAIT": "1"})
    assert sites == {(7, "distributed"): (1, "`dist.all_reduce() with TORCH_NCCL_BLOCKING_WAIT`"),
                     (8, "distributed"): (1, "`dist.barrier()`"), (10, "distributed"): (1, "`dist.barrier()`"),
                     (12, "distributed"): (1, "`dist.all_reduce() with TORCH_NCCL_BLOCKING_WAIT`")}


def test_warn_mode_gloo_on_cpu_tensors_is_no_device_sync(fake_cuda, tmp_path, monkeypatch):
    assert run_watched(tmp_path, monkeypatch, {"TORCH_NCCL_BLOCKING_WAIT": "1"}) == {}


GLOO_CUDA_SCRIPT = """import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="file://{store}", rank=0, world_size=1)
t = torch.ones(2, device="cuda")
dist.all_reduce(t)
work = dist.all_reduce(t, async_op=True)
work.wait()
dist.barrier()
dist.destroy_process_group()
"""


def test_predict_mode_gloo_on_cuda_tensors_waits_at_each_collective(tmp_path):
    from syncfree.script_run import run_script

    script = tmp_path / "gloo_job.py"
    script.write_text(GLOO_CUDA_SCRIPT.format(store=tmp_path / "store"))
    result = run_script(str(script), mode="predict")
    assert result.exit_code == 0, result.error
    assert lines_of(result) == {6: ("distributed", 1), 8: ("distributed", 1)}  # gloo's barrier: no device sync


def test_a_failing_rank_fails_the_job_and_the_stopped_rank_still_reports(tmp_path):
    """torchrun stops the other ranks with SIGTERM when one fails: they still write their reports. In a machine
    format the report alone is on stdout (the ranks' own output goes to stderr)."""
    script = tmp_path / "fails.py"
    script.write_text(textwrap.dedent("""\
        import os
        import time
        import torch
        x = torch.ones(1, device="cuda")
        x.item()
        print("rank", os.environ["RANK"], "read it", flush=True)
        if os.environ["RANK"] == "1":
            while not os.path.exists("rank0-waits"):  # rank 0 is past its sync
                time.sleep(0.05)
            raise SystemExit(3)
        open("rank0-waits", "w").close()
        time.sleep(100)
    """))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "syncfree", "run", "--standalone", "--nproc-per-node", "2", "--format", "json",
         str(script)],
        cwd=tmp_path, env=job_env(), capture_output=True, text=True, timeout=110)
    assert time.monotonic() - started < 90  # rank 0 did not sleep its 100 s out
    assert result.returncode == 1, result.stderr  # torchrun's status
    assert "syncfree: error: torchrun exited with status 1" in result.stderr
    [entry] = json.loads(result.stdout)  # the report alone
    assert (entry["path"], entry["line"], entry["rule"]) == ("fails.py", 5, "SF101")
    # Rank 0, stopped by SIGTERM, kept its report.
    assert [r["count"] for r in entry["ranks"]] == [1, 1]
    assert "rank 0 read it" in result.stderr and "rank 1 read it" in result.stderr


def test_a_ranks_forked_children_are_in_the_merged_report(tmp_path):
    """The run's mechanism for child processes (syncfree.processes) carries over: a rank's forked child's syncs are
    the rank's, marked as made in child processes."""
    script = tmp_path / "forks.py"
    script.write_text(textwrap.dedent("""\
        import os
        import torch
        x = torch.ones(2, device="cuda")
        pid = os.fork()
        if pid == 0:
            x.sum().item()
            os._exit(0)
        os.waitpid(pid, 0)
        x.max().item()
    """))
    env = {**job_env(), **torchrun_env(0, 1)}
    result = subprocess.run([sys.executable, "-m", "syncfree", "run", "--rank-report-dir", str(tmp_path / "ranks"),
                             str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "forks.py:9:1: SF101 `.item()` waits for the GPU [rank 0 ×1] (predicted) ×1" in result.stdout
    assert "forks.py:6:5: SF101 `.item()` waits for the GPU in child processes [rank 0 ×1] (predicted) ×1" \
        in result.stdout, result.stdout
    assert "2 syncs on 1 of 1 rank" in result.stdout


def test_a_rank_runs_a_module_as_python_m(tmp_path):
    (tmp_path / "jobmod.py").write_text("import torch\nx = torch.ones(2, device='cuda')\nx.sum().item()\n")
    env = {**job_env(), **torchrun_env(0, 1)}
    result = subprocess.run([sys.executable, "-m", "syncfree", "run", "--rank-report-dir", str(tmp_path / "ranks"),
                             "-m", "jobmod"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "jobmod.py:3:1: SF101 `.item()` waits for the GPU [rank 0 ×1] (predicted) ×1" in result.stdout


# --------------------------------------------------------------------------- in a notebook


NOTEBOOK_JOB = """\
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
x = torch.ones(4, device="cuda")
for step in range(3):
    dist.all_reduce(x)
    total = x.sum().item()
if dist.get_rank() == 0:
    print(f"rank 0 says {x.sum():.1f}")
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def ip():
    pytest.importorskip("IPython")
    from IPython.testing import globalipapp

    shell = globalipapp.start_ipython() or globalipapp.get_ipython()
    shell.run_line_magic("load_ext", "syncfree")
    yield shell
    shell.run_line_magic("unload_ext", "syncfree")


def run_cell(ip, cell: str):
    """(result, stdout, merged-report bundles) of a cell run as the kernel runs it."""
    from IPython.utils.capture import capture_output

    from syncfree.distributed.display import MIME_TYPE

    with capture_output() as captured:
        result = ip.run_cell(cell, store_history=True)
    return result, captured.stdout, [o.data for o in captured.outputs if MIME_TYPE in o.data]


def test_the_notebook_bundle_is_the_schema_with_a_text_fallback(monkeypatch, tmp_path):
    pytest.importorskip("jsonschema")
    from syncfree.distributed import display

    merged = merged_pair()
    bundle = merged._repr_mimebundle_()
    assert set(bundle) == {display.MIME_TYPE, "text/html", "text/plain"}
    data = bundle[display.MIME_TYPE]
    display.validate_merged(data)
    assert bundle["text/plain"] == merged.text()
    assert data["summary"] == merged.summary() and data["extremes"] == {"least": 1, "most": 0}
    assert [(s["file"], s["line"], s["divergent"], s["title"]) for s in data["sites"]] == [
        ("examples/ddp_train.py", 53, False, "`.item()` waits for the GPU"),
        ("examples/ddp_train.py", 55, True, "Formatting a CUDA tensor into a string waits for the GPU")]
    assert data["sites"][1]["per_rank"] == [{"rank": 0, "count": 2, "blocked_ms": None},
                                            {"rank": 1, "count": 0, "blocked_ms": None}]
    # Relative to the kernel's working folder (the notebook's): what JupyterLab opens, and no absolute path saved.
    monkeypatch.chdir(tmp_path)
    elsewhere = display.merged_data(merged)["sites"][0]["path"]
    assert elsewhere == os.path.relpath(EXAMPLE, tmp_path).replace(os.sep, "/") and elsewhere.startswith("../")
    assert data["ranks"][0]["counted"] == 12 and data["spread_after"] == SPREAD_AFTER
    # A relative file is made absolute against the rank's working folder.
    relative = MergedReport([rank_report(0, [site("train.py", 3, 1)], cwd="/job", world=1)])
    assert relative.to_dict()["sites"][0]["path"] == "/job/train.py"
    # Frontends without the extension: a column per rank, the divergent site marked, the totals.
    page = bundle["text/html"]
    assert '<th style="' in page and ">rank 0</th>" in page and ">rank 1</th>" in page
    assert page.count(">divergent</span>") == 1
    assert ">×2</td><td" in page and ">—</td>" in page and ">per rank</td>" in page and ">×12</td>" in page
    monkeypatch.setattr(display, "MAX_SITES", 1)
    data = display.merged_data(merged)
    assert [s["line"] for s in data["sites"]] == [53] and data["truncated"] == 1
    display.validate_merged(data)


def test_the_html_fallback_escapes_every_string_and_spreads_many_ranks():
    from syncfree.distributed.display import merged_data, merged_html

    hostile = '<img src=x onerror="alert(1)">'
    reports = [rank_report(rank, [site(hostile, 3, 20 if rank else 2)], world=6, cwd="/job",
                           notes=(hostile,)) for rank in range(6)]
    page = merged_html(merged_data(MergedReport(reports)))
    assert "<img" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert ">min</th>" in page and ">rank 0</th>" not in page
    assert ">×2 (rank 0)</td>" in page and ">×20</td>" in page and ">×20 (rank 1)</td>" in page


def test_merge_magic_shows_the_merged_report_of_a_folder(ip, tmp_path):
    for rank in range(2):
        write_rank_report(tmp_path, rank_report(rank, [site(str(EXAMPLE), 53, 10)] +
                                                ([site(str(EXAMPLE), 55, 2, kind="format", rule="SF202")]
                                                 if rank == 0 else []), cwd=str(ROOT)))
    result, _, bundles = run_cell(ip, f"%syncfree merge {tmp_path}")
    assert result.success and len(bundles) == 1
    from syncfree.distributed.display import MIME_TYPE

    data = bundles[0][MIME_TYPE]
    assert [(s["line"], [r["count"] for r in s["per_rank"]], s["divergent"]) for s in data["sites"]] == [
        (53, [10, 10], False), (55, [2, 0], True)]
    assert data["directory"] == str(tmp_path)
    assert "[divergent, rank 0 ×2, rank 1 ×0]" in bundles[0]["text/plain"]
    assert isinstance(ip.user_ns["_syncfree_merged"], MergedReport)


@pytest.mark.parametrize(("line", "message"), [
    ("%syncfree merge {missing}", "%syncfree merge: cannot read {missing}: no such folder"),
    ("%syncfree merge {empty}", "%syncfree merge: {empty}: no syncfree rank reports (rank-NNNNN.json)"),
    ("%syncfree merge", "%syncfree merge: the following arguments are required: DIR"),
    ("%syncfree merge {empty}/rank-00000.json", "%syncfree merge: {empty}/rank-00000.json is a file: merge takes "
                                               "their folder: %syncfree merge {empty}"),
    ("%syncfree merge {empty}/merged.json", "%syncfree merge: {empty}/merged.json is a file: merge takes the folder "
                                           "of rank reports"),
    ("%syncfree merge {empty} --select NOPE", "%syncfree merge: argument --select: 'NOPE' matches no rule code"),
    ("%syncfree run train.py", "%syncfree run: this starts a distributed job: give --nproc-per-node N"),
    ("%syncfree run --nproc-per-node 2", "%syncfree run: the script to run is missing"),
    ("%syncfree run --nproc-per-node 2 -o x.json train.py", "%syncfree run: -o: the notebook shows the merged report"),
    ("%syncfree run --nproc-per-node 2 missing.py", "%syncfree run: cannot read missing.py: no such file"),
    ("%syncfree run --nproc-per-node 2 -m", "%syncfree run: -m takes a module name"),
    ("%syncfree run --nproc-per-node 0 train.py", "%syncfree run: argument --nproc-per-node/--nproc_per_node: "
                                                  "--nproc-per-node takes a number >= 1"),
])
def test_the_distributed_magics_say_bad_input_in_one_line(ip, tmp_path, line, message):
    from IPython.core.error import UsageError
    from IPython.utils.capture import capture_output

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "rank-00000.json").write_text("{}")
    (tmp_path / "empty" / "merged.json").write_text("[]")
    names = {"missing": tmp_path / "missing", "empty": tmp_path / "empty"}
    with pytest.raises(UsageError) as raised, capture_output() as captured:
        ip.run_line_magic("syncfree", line.format(**names).split(" ", 1)[1])
    assert captured.stderr == ""  # no usage text above the one line
    assert str(raised.value).startswith(message.format(**names))
    assert "\n" not in str(raised.value)


def test_run_magic_runs_the_job_streams_its_output_and_shows_the_merged_report(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    (tmp_path / "job.py").write_text(NOTEBOOK_JOB)
    result, stdout, bundles = run_cell(ip, "%syncfree run --standalone --nproc-per-node 2 --rank-report-dir ranks job.py")
    assert result.success, stdout
    assert "rank 0 says 32.0" in stdout  # the program's output, in the cell
    assert "syncs on 2 of 2 ranks" not in stdout  # the report is the table, not the launcher's text
    assert len(bundles) == 1
    from syncfree.distributed.display import MIME_TYPE

    data = bundles[0][MIME_TYPE]
    rows = {s["line"]: s for s in data["sites"]}
    assert [r["count"] for r in rows[8]["per_rank"]] == [3, 3] and not rows[8]["divergent"]
    assert [r["count"] for r in rows[10]["per_rank"]] == [1, 0] and rows[10]["divergent"]
    assert rows[8]["path"] == "job.py"  # the kernel's working folder is the job's
    assert data["directory"] == "ranks" and str(tmp_path) not in json.dumps(data)  # no absolute path saved
    assert sorted(p.name for p in (tmp_path / "ranks").glob("rank-*.json")) == ["rank-00000.json", "rank-00001.json"]
    assert ip.user_ns["_syncfree_merged"].to_dict()["totals"]["divergent_sites"] == 1


def test_an_interrupt_stops_the_whole_job_as_ctrl_c_does(tmp_path):
    """JupyterLab interrupts a kernel with SIGINT to its process group (jupyter_client's local
    provisioner): the job started from a cell is in that group and stops as under Ctrl-C; the
    cell waits for it, then the interrupt goes on."""
    import signal

    said = tmp_path / "said"
    job = ("import signal, sys, time\n"
           f"signal.signal(signal.SIGINT, lambda *a: (open({str(said)!r}, 'w').write('SIGINT'), sys.exit(3)))\n"
           "print('ready', flush=True)\ntime.sleep(60)\n")
    kernel = ("import sys\nfrom syncfree.distributed.notebook import _stream\n"
              "try:\n"
              f"    _stream([sys.executable, '-c', {job!r}], sys.stdout)\n"
              "except KeyboardInterrupt:\n"
              "    print('interrupted after the job ended', flush=True)\n")
    # A process group of its own, as a kernel has.
    process = subprocess.Popen([sys.executable, "-c", kernel], stdout=subprocess.PIPE, text=True,
                               start_new_session=True, env=job_env())
    try:
        assert process.stdout.readline() == "ready\n"
        os.killpg(process.pid, signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert said.read_text() == "SIGINT"
    assert out == "interrupted after the job ended\n"


def _default_signals() -> None:
    """In a child about to exec: the signals a background job or ``nohup`` ignores back at their default."""
    import signal

    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", pytest.param("SIGHUP", marks=pytest.mark.exhaustive),
                                     pytest.param("SIGUSR1", marks=pytest.mark.exhaustive)])
def test_a_signal_to_the_launcher_goes_to_torchrun_and_the_ranks_reports_are_merged(tmp_path, signame):
    # SIGTERM killed `syncfree run --nproc-per-node 2` at once, without a report or a word, while torchrun and the
    # ranks lived on and the rank files stayed in the temp folder; SIGINT took 61 s (a 60 s wait, then torchrun
    # SIGKILLed) and left both ranks running, orphaned, with "no rank wrote a report". So did SIGHUP (the terminal
    # closed) and SIGUSR1 (Slurm's warning), which torchrun is sent as SIGTERM.
    import signal

    signum = getattr(signal, signame)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import os, sys, time, torch
        x = torch.randn(4, device="cuda")
        x.sum().item()
        with open(f"pid-{os.environ['RANK']}", "w") as handle:
            handle.write(str(os.getpid()))
        print("rank ready", file=sys.stderr, flush=True)
        while True:  # a rank that hangs
            time.sleep(0.05)
        """))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**job_env(), "TMPDIR": str(temporary)}
    process = subprocess.Popen([sys.executable, "-m", "syncfree", "run", "--standalone", "--nproc-per-node", "2",
                                "train.py"], cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_default_signals)
    pids: list[int] = []
    # No wait without an end: a job that never says it is ready fails the test instead of hanging the suite
    # (the whole job: torchrun and the ranks hold the pipe open too).
    watchdog = threading.Timer(120, os.killpg, (process.pid, signal.SIGKILL))
    watchdog.start()
    try:
        ready = 0
        for line in process.stderr:
            # torchrun runs the ranks with python -u: a print is two writes, so the two ranks' lines can
            # interleave as "rank readyrank ready\n\n" (the suite hung here once).
            ready += line.count("rank ready")
            if ready >= 2:
                break
        watchdog.cancel()
        pids = [int((tmp_path / f"pid-{rank}").read_text()) for rank in (0, 1)]
        process.send_signal(signum)
        out, err = process.communicate(timeout=150)
        alive = [pid for pid in pids if _running(pid)]
    finally:
        process.kill()
        for pid in pids:  # whatever happened, no rank is left hanging
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    assert process.returncode == -signum, err
    assert not alive, alive  # no rank outlives the launcher
    assert "syncs on 2 of 2 ranks" in out and "train.py:3:1: SF101 " in out, (out, err)
    assert "torchrun stopped the ranks; the report merges those that wrote theirs" in err, err
    assert not list(temporary.glob("syncfree-ranks-*")), list(temporary.iterdir())


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (an orphan zombie, waiting for init to reap it, has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_sigterm_to_a_rank_after_its_script_ended_waits_for_its_report():
    # torchrun's SIGTERM (another rank failed) just after the script ended raised SystemExit inside syncfree's wrap-up
    # or killed the rank before it wrote its file: its report was lost (3 runs in 4 on a 2-rank job)
    import signal

    from syncfree.cli.run_rank import _StopOnTerm

    stop = _StopOnTerm(script="/job/ended.py")  # not on the stack: the script has ended
    try:
        stop._stop(signal.SIGTERM, sys._getframe())
        assert stop.held == signal.SIGTERM
    finally:
        stop.close()
    running = _StopOnTerm(script=__file__)  # this frame is the script's: it is stopped, as before
    try:
        with pytest.raises(SystemExit) as stopped:
            running._stop(signal.SIGTERM, sys._getframe())
        assert stopped.value.code == 143
    finally:
        running.close()
