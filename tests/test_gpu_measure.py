"""benchmarks/gpu_measure.py (the host and device paths side by side, the measurement benchmarks/gpu_measure.sh runs
on a lent GPU) rehearsed on the CPU at the tiny sizes, and the script's guard without CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gpu_measure as gm
import paper_cost
import pytest
import torch
from helpers import REPO
from test_train_throughput import _tiny_paper_config

from attention_geometry.training import measure as tm
from attention_geometry.training import measure_device as md
from attention_geometry.training.hyper import resolve_hyper

VIT = ("vit-tiny", "classifier")


def test_the_plan_puts_both_paths_of_every_size_first_then_varlen_then_the_captures():
    rows = gm.plan(["bert-mini", "vit-tiny"], ["encoder", "decoder"], ["cuda-graphs", "compile"])
    assert rows[:7] == [
        ("bert-mini", "encoder", "host", "eager", "mask"),
        ("bert-mini", "encoder", "device", "eager", "mask"),
        ("bert-mini", "decoder", "host", "eager", "mask"),
        ("bert-mini", "decoder", "device", "eager", "mask"),
        ("vit-tiny", "classifier", "host", "eager", "mask"),
        ("vit-tiny", "classifier", "device", "eager", "mask"),
        ("bert-mini", "encoder", "device", "eager", "varlen"),  # images have no padding: no varlen row
    ]
    assert rows[7:] == [
        ("bert-mini", "encoder", "device", "cuda-graphs", "mask"),
        ("vit-tiny", "classifier", "device", "cuda-graphs", "mask"),
        ("bert-mini", "encoder", "device", "compile", "mask"),
        ("vit-tiny", "classifier", "device", "compile", "mask"),
        ("bert-mini", "decoder", "device", "cuda-graphs", "mask"),
        ("bert-mini", "decoder", "device", "compile", "mask"),
        ("bert-mini", "decoder", "device", "eager", "varlen"),
    ]
    assert gm.plan(["bert-mini", "vit-tiny"], ["encoder", "decoder"], ["compile"], varlen=False) == [
        r for r in rows if r[4] == "mask" and r[3] != "cuda-graphs"
    ]


def test_the_shared_rounds_come_after_the_first_capture_of_the_first_objectives():
    rows = gm.plan(["bert-mini", "vit-tiny"], ["encoder", "decoder"], ["cuda-graphs", "compile"])
    rounds = [("vit-tiny", "classifier", 1), ("vit-tiny", "classifier", 8)]
    order = gm.schedule(rows, rounds, 2, True)
    assert order[:9] == rows[:9] and order[9:11] == rounds and order[11:] == rows[9:]
    assert order[7:9] == [
        ("bert-mini", "encoder", "device", "cuda-graphs", "mask"),
        ("vit-tiny", "classifier", "device", "cuda-graphs", "mask"),
    ]
    assert order[11] == ("bert-mini", "encoder", "device", "compile", "mask")
    eager = gm.plan(["bert-mini"], ["encoder"], [])
    assert gm.schedule(eager, rounds, 1, False) == [*eager, *rounds]


def test_the_passes_fit_the_memory():
    """The recipe's update of 256 x 512 in fp16: bert-mini in one pass; bert-large in 2 on an H200 (~139 GiB free),
    in 4 on an H100 (~78 GiB)."""
    recipe = dict(batch_size=256, grad_accum=8, precision="fp16", vocab_size=30522, seq_len=512)
    gib = 2**30
    mini, large = (resolve_hyper(s, recipe) for s in ("bert-mini", "bert-large"))
    assert md.suggest_passes(mini, "encoder", 512, 78 * gib) == 1
    assert md.suggest_passes(large, "encoder", 512, 139 * gib) == 2
    assert md.suggest_passes(large, "encoder", 512, 78 * gib) == 4
    assert md.suggest_passes(large, "encoder", 512, float("inf")) == 1


def test_the_rehearsal_measures_both_paths_and_records_what_fails(tmp_path, capsys):
    config, _ = _tiny_paper_config(tmp_path)
    out = tmp_path / "m.json"
    argv = ["--device", "cpu", "--sizes", "tiny", "vit-tiny", "--objectives", "encoder", "decoder"]
    argv += ["--captures", "cuda-graphs", "--steps", "2", "--warmup", "1", "--block-len", "32", "--peak-tflops", "1"]
    argv += ["--share-runs", "1", "2", "--share-seconds", "0.5", "--budget-s", "3600"]  # no row skipped on a busy host
    assert gm.main([*argv, "--config", str(config), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    rows = got["rows"]
    keys = ("size", "objective", "batch_path", "capture", "padded_attention")
    assert [tuple(r[k] for k in keys) for r in rows] == gm.plan(
        ["tiny", "vit-tiny"], ["encoder", "decoder"], ["cuda-graphs"]
    )
    check = got["varlen_check"]  # on the CPU the segments run as a dense mask: the masked run's numbers exactly
    assert check["ok"] and check["size"] == "tiny" and check["kernel"] == "dense segment mask (fp32)"
    assert check["bidirectional"]["out_rel"] <= 1e-6 and check["causal"]["grad_rel"] <= 1e-6
    for r in rows[:6]:  # the host and device paths, eager
        assert r["precision"] == ("fp16" if r["size"] == "tiny" else "fp32") and r["device_passes"] == 1
        assert len(r["ms_per_update_all"]) == 2 and r["ms_per_update"] > 0 and len(r["losses"]) == 3
        assert r["mfu"] == pytest.approx(r["tflop_per_update"] / r["ms_per_update"] * 1e3)  # peak 1 TFLOP/s
        assert r["syncs_per_update"] is None  # counted on CUDA only
    # no random masks: the clean decoder's and the ViT's first update sees the same batch on both paths
    for i in (2, 4):
        assert rows[i + 1]["losses"][0] == pytest.approx(rows[i]["losses"][0], rel=1e-3)
    # varlen (the encoder's segments; the decoder without a mask) from the masked row's weights and masks
    for varlen, masked in ((6, 1), (10, 3)):
        assert rows[varlen]["padded_attention"] == "varlen" and rows[varlen]["ms_per_update"] > 0
        assert rows[varlen]["losses"][0] == pytest.approx(rows[masked]["losses"][0], rel=1e-3)
    for r in rows[7:10]:  # CUDA graphs need CUDA: the row records why, the rest still runs
        assert r["error"].startswith("UserError: overrides.capture: cuda-graphs needs a CUDA device")
    summary = {(s["size"], s["objective"]): s for s in got["summary"]}
    assert set(summary[("tiny", "encoder")]["speedup_over_host"]) == {"device/eager", "device/eager/varlen"}
    # one more update profiled on the eager paths of each size's first objective, and no other row
    profiled = [(r["size"], r["objective"], r["batch_path"], r["padded_attention"]) for r in rows if "profile" in r]
    assert profiled == [("tiny", "encoder", "host", "mask"), ("tiny", "encoder", "device", "mask")] + [
        ("vit-tiny", "classifier", p, "mask") for p in ("host", "device")
    ] + [("tiny", "encoder", "device", "varlen")]
    for r in rows:
        if "profile" in r:
            prof = r["profile"]
            assert prof["device_busy_ms"] is None and prof["top_by"] == "self host time"
            assert prof["top"] and sum(o["share"] for o in prof["top"]) <= 1 + 1e-9
            assert any(o["name"] in ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear") for o in prof["top"])
    printed = capsys.readouterr().out
    assert "speed-up over the host path" in printed and printed.count("    profile: ") == 5
    assert "varlen check (dense segment mask (fp32), tol 1e-05)" in printed
    # the ViT (the only default share size measured here) trained 1, then 2 processes at once, after the first
    # objectives' captures and before the other objectives' captures
    shared = got["shared"]
    assert [(r["size"], r["runs"]) for r in shared] == [("vit-tiny", 1), ("vit-tiny", 2)]
    assert rows[8]["elapsed_s"] <= shared[0]["elapsed_s"] <= shared[1]["elapsed_s"] <= rows[9]["elapsed_s"]
    for r in shared:
        assert len(r["updates_each"]) == r["runs"] and r["batch_path"] == "device" and r["capture"] == "eager"
        for n, ms in zip(r["updates_each"], r["ms_per_update_each"]):
            assert n >= 1 and n * ms / 1e3 >= 0.5  # each ran updates until its window of 0.5 s was over
        assert r["updates_per_s"] == pytest.approx(sum(1e3 / ms for ms in r["ms_per_update_each"]))
        assert r["mfu"] == pytest.approx(r["updates_per_s"] * rows[4]["tflop_per_update"])  # peak 1 TFLOP/s
    gain = got["shared_summary"][0]["gain_over_one_run"]
    assert set(gain) == {"2"} and gain["2"] == pytest.approx(
        shared[1]["updates_per_s"] / shared[0]["updates_per_s"], rel=0.01
    )
    assert "2 at once: ms per update of each" in printed
    # benchmarks/paper_cost.py --measured reads this very document: per size and objective the fastest row that ran,
    # and for the ViT packed 2 runs per job that MFU times the measured gain of 2 runs at once
    ran = [r for r in rows if r.get("mfu")]
    assert {(r["size"], r["objective"]) for r in ran} == {("tiny", "encoder"), ("tiny", "decoder"), VIT}
    best = paper_cost.measured_mfu(got)
    assert set(best) == {(r["size"], r["objective"]) for r in ran}
    for key, (mfu, _) in best.items():
        assert mfu == max(r["mfu"] for r in ran if (r["size"], r["objective"]) == key)
    # issue 57.6: the round of one run against the eager device-path row of the same size, by hand
    eager = next(r for r in rows if r["size"] == "vit-tiny" and r["batch_path"] == "device" and r["capture"] == "eager")
    one = got["shared_summary"][0]["one_run_vs_eager_row"]
    ratio = shared[0]["ms_per_update_each"][0] / eager["ms_per_update"]
    assert one["ratio"] == pytest.approx(ratio) and one["agrees"] == (0.8 <= ratio <= 1.2)
    assert ("agree" if one["agrees"] else "DISAGREE") in printed
    packed = paper_cost.measured_mfu(got, {"vit-tiny": 2})[VIT]
    if one["agrees"]:
        assert packed[0] == pytest.approx(best[VIT][0] * gain["2"]) and "2 runs at once" in packed[1]
    else:
        assert packed[0] == best[VIT][0] and "refused" in packed[1]


def test_busy_time_is_the_union_of_the_kernels_intervals():
    assert tm.busy_ms([]) == 0.0
    # overlapping, nested, touching and out of order (microseconds): [0, 15] + [20, 30] + [30, 31] = 26 us
    assert tm.busy_ms([(20, 30), (0, 10), (5, 15), (2, 3), (30, 31)]) == pytest.approx(0.026)
    assert tm.busy_ms([(0, 1000), (100, 200)]) == pytest.approx(1.0)


def test_the_profile_names_the_operators_that_ran():
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def work():
        for _ in range(3):
            torch.mm(a, b)
        torch.sort(a.flatten())

    prof = tm.profile_update(work, torch.device("cpu"))
    ops = {o["name"]: o for o in prof["top"]}
    assert ops["aten::mm"]["calls"] == 3 and ops["aten::sort"]["calls"] == 1
    assert prof["wall_ms"] > 0 and ops["aten::mm"]["self_ms"] < prof["wall_ms"]
    assert sum(o["share"] for o in prof["top"]) == pytest.approx(1.0)  # fewer operators than `top`: all of them
    assert (prof["syncs"], prof["copies"], prof["launches"], prof["kernels"]) == (0, 0, 0, None)
    line = gm.profile_line(prof)
    assert "ms under the profiler" in line and "aten::mm" in line


def test_a_cuda_profile_line_gives_the_busy_share_of_the_unprofiled_update():
    prof = {"wall_ms": 50.0, "device_busy_ms": 10.0, "device_idle_share": 0.8, "kernels": 700, "syncs": 2}
    prof |= {"copies": 3, "launches": 690, "top_by": "self device time"}
    prof["top"] = [{"name": "aten::mm", "calls": 40, "self_ms": 6.0, "share": 0.6}]
    shared = md.with_share(prof, 40.0)
    assert (
        shared["busy_share_of_update"] == pytest.approx(0.25)
        and md.with_share({**prof, "device_busy_ms": None}, 40.0)["busy_share_of_update"] is None
    )
    line = gm.profile_line(shared)
    assert "device busy 10.0 ms (25% of the update; 50.0 ms under the profiler), 700 kernels" in line
    assert "690 launches, 2 syncs, 3 copies" in line and "aten::mm 6.0 ms (60%)" in line


def test_a_spent_budget_skips_the_rows(tmp_path):
    config, _ = _tiny_paper_config(tmp_path)
    out = tmp_path / "m.json"
    argv = ["--device", "cpu", "--sizes", "tiny", "--objectives", "encoder", "--captures", "--budget-s", "0"]
    assert gm.main([*argv, "--share-sizes", "tiny", "--config", str(config), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    rows, shared = got["rows"], got["shared"]
    assert len(rows) == 3 and all(r["skipped"].startswith("budget of 0 s spent") for r in rows)
    assert rows[2]["padded_attention"] == "varlen"
    assert [r["runs"] for r in shared] == [1, 8] and all(r["skipped"].startswith("budget of 0 s") for r in shared)


def test_a_shared_round_whose_worker_fails_records_why(tmp_path):
    config, _ = _tiny_paper_config(tmp_path)
    timing = tm.Timing(1, 1, 32, 0.1)
    setup = md.Setup(config, "paper", timing, torch.device("cpu"), None, tmp_path)
    r = md.measure_shared("vit-tiny", "classifier", 1, tmp_path / "no-such-images", setup, 0.1, 1)
    assert r["runs"] == 1 and r["error"].startswith("worker 0 exited with status 1")
    assert "updates_per_s" not in r and "error" in gm.shared_line(r)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the guard is for machines without CUDA")
def test_the_script_without_cuda_runs_nothing(tmp_path):
    script = REPO / "benchmarks" / "gpu_measure.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    env = {**os.environ, "OUT": str(tmp_path / "o"), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.strip().startswith("gpu_measure: no CUDA device here")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("case", ["no interpreter", "no torch", "failing import"])
def test_the_script_never_reads_a_broken_python_as_no_cuda(tmp_path, case):
    """Issue 57.6: a wrong interpreter, a python without torch or a failing import used to print "no CUDA device
    here" and exit 0; each is now one line and exit status 2, and nothing runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    if case == "no interpreter":
        python = str(tmp_path / "missing" / "python")
    elif case == "no torch":  # the interpreter without site-packages
        fake.write_text(f'#!/bin/sh\nexec "{getattr(sys, "_base_executable", sys.executable)}" -S -I "$@"\n')
        fake.chmod(0o755)
        python = str(fake)
    else:
        fake.write_text('#!/bin/sh\necho "ImportError: libcuda.so.1: cannot open shared object file" >&2\nexit 1\n')
        fake.chmod(0o755)
        python = str(fake)
    env = {**os.environ, "OUT": str(tmp_path / "o"), "PYTHON": python}
    script = REPO / "benchmarks" / "gpu_measure.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stdout, done.stderr)
    assert lines[0].startswith(f"gpu_measure: {python} cannot import torch") and "no CUDA" not in done.stdout
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("parts", ["measure chek", "  "])
def test_the_script_refuses_an_unknown_step_before_anything_runs(tmp_path, parts):
    env = {**os.environ, "OUT": str(tmp_path / "o"), "PYTHON": sys.executable, "GPU_MEASURE_PARTS": parts}
    done = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_measure.sh")], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2 and "GPU_MEASURE_PARTS" in done.stdout and not (tmp_path / "o").exists()
