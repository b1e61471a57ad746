"""The training update's speed on a GPU, the host path and the device path side by side (issue 39; docs/training.md,
"The device path (GPU)"): ms per update, tokens/s and MFU of each size and objective under config/paper.yaml's
recipe, in one run that fits a time budget. benchmarks/gpu_measure.sh runs it with gpu_check.sh on a lent GPU.

    python benchmarks/gpu_measure.py [--device cuda] [--sizes bert-mini bert-base bert-large vit-tiny]
        [--objectives encoder decoder-paper decoder] [--captures cuda-graphs compile] [--no-varlen] [--steps 5]
        [--warmup 2]
        [--budget-s 210] [--json PATH] [--config config/paper.yaml] [--group paper] [--block-len 512] [--no-profile]
        [--share-sizes vit-tiny bert-mini] [--share-runs 1 8] [--share-seconds 3]

What is timed: the training loop's own update (attention_geometry.training.measure.time_updates: training/step.Step,
the host source or the device source with `batch_path: device`), each between two synchronizations, the median of
--steps after --warmup untimed ones (the first of which holds a compile or a graph capture: its time is in
`first_ms`), on random data of the recipe's shapes (training.measure: vocabulary 30,522, 10 % of the documents
padded; 32 x 32 RGB images for the ViT). First `varlen_check`: the device path's variable-length flash attention
(`padded_attention: varlen`) against the key-padding mask on one padded bert-mini batch (outputs and gradients;
dropout off), and the causal objectives' unmasked attention against theirs. Rows, in this order, until the budget is
spent (later rows are written as skipped):
  1. every size and objective on the host path (eager, as measured before) and the device path (eager; padded
     passes with the key-padding mask, `padded_attention: mask`);
  2. the device path with `padded_attention: varlen` (eager) for the first objective of each text size;
  3. the first --capture of the device path (default cuda-graphs) for the first objective of each size (the ViT:
     classifier);
  4. rounds of runs sharing the device (`shared`, measure_shared): for each --share-sizes size (its first
     objective, device path, eager), --share-runs training processes at once (default 1, then 8), each timed over
     the same --share-seconds window after its warm-up: each one's ms per update, and the updates per second, tokens/s
     and MFU of all together (the target: a GPU that trains 8 or more ViT runs at once). A round of one run must
     agree with the same size's eager device-path row within 20 % (measure_device.one_run_agreement); where it does
     not, the summary says so and benchmarks/paper_cost.py uses none of that size's gains;
  5. the other --captures (default compile, slow to start) for the first objective of each size;
  6. each --capture for the other objectives;
  7. `padded_attention: varlen` (eager) for the other objectives (--no-varlen: no varlen rows).
The device path's `device_passes` is the fewest passes whose activations fit in 60 % of the free memory (a rough
count, `suggest_passes`); an out-of-memory error retries with twice as many. A row that fails records its error
and the run goes on. On CUDA each row also counts the host synchronizations of one more update
(torch.cuda.set_sync_debug_mode: `syncs_per_update`), and every row keeps each update's mean loss (`losses`: the
device path's rows of one size and objective start from the same weights and masks, so eager, compiled and graphed
passes should agree to the precision's rounding; a varlen row's dropout falls elsewhere). Both eager paths of each
size's first objective also profile one more update, and so does its varlen row (`profile`:
training.measure.profile_update; the device's busy and idle time, its kernels, the runtime's synchronizations,
copies and launches, the operators that take the most time), so that a target missed comes with where the
update's time went; --no-profile skips it. FLOPs per update: the one cost model
(attention_geometry.training.cost.update_flops); the peak: --peak-tflops, else the card's dense bf16 peak by name
(cost.GPU_PEAK_TFLOPS). --device cpu rehearses it all
(tests/test_gpu_measure.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from attention_geometry.training.cost import gpu_peak_flops
from attention_geometry.training.measure import Timing, write_random_corpus, write_random_images
from attention_geometry.training.measure_device import (
    SHARED_AGREEMENT,
    Setup,
    measure,
    measure_shared,
    one_run_agreement,
    variant,
    varlen_check,
)

REPO = Path(__file__).resolve().parents[1]

Row = tuple[str, str, str, str, str]  # (size, objective, batch_path, capture, padded_attention)


def plan(sizes: list[str], objectives: list[str], captures: list[str], varlen: bool = True) -> list[Row]:
    """The rows (size, objective, batch_path, capture, padded_attention) in the order they are measured (the module
    docstring)."""
    objs = {s: ["classifier"] if s.startswith("vit") else list(objectives) for s in sizes}
    text = [s for s in sizes if not s.startswith("vit")] if varlen else []
    rows = [(s, o, path, "eager", "mask") for s in sizes for o in objs[s] for path in ("host", "device")]
    rows += [(s, objs[s][0], "device", "eager", "varlen") for s in text]
    rows += [(s, objs[s][0], "device", c, "mask") for c in captures for s in sizes]
    rows += [(s, o, "device", c, "mask") for c in captures for s in sizes for o in objs[s][1:]]
    rows += [(s, o, "device", "eager", "varlen") for s in text for o in objs[s][1:]]
    return rows


def schedule(rows: list[Row], rounds: list[tuple], n_sizes: int, captures: bool) -> list[tuple]:
    """The planned rows (plan) with the rounds of shared runs after the first capture of each size's first
    objective (the module docstring: a compile, the second capture, is slow to start)."""
    first_objective = {}
    for r in rows:
        first_objective.setdefault(r[0], r[1])
    eager = sum(r[3] == "eager" and (r[4] == "mask" or first_objective[r[0]] == r[1]) for r in rows)
    first = eager + (n_sizes if captures else 0)
    return [*rows[:first], *rounds, *rows[first:]]


def profiled(rows: list[Row]) -> set[Row]:
    """The rows whose one more update is profiled (training.measure.profile_update): both paths, eager (the device
    path's with each padded attention), of each size's first objective."""
    first = {}
    for size, objective, *_ in rows:
        first.setdefault(size, objective)
    return {r for r in rows if r[3] == "eager" and first[r[0]] == r[1]}


def profile_line(prof: dict, top: int = 4) -> str:
    """A row's profile in one line: the device's busy and idle time, the runtime calls, the top operators."""
    if prof["device_busy_ms"] is None:
        head = f"{prof['wall_ms']:.1f} ms under the profiler"
    else:
        head = (
            f"device busy {prof['device_busy_ms']:.1f} ms ({prof['busy_share_of_update']:.0%} of the update; "
            f"{prof['wall_ms']:.1f} ms under the profiler), {prof['kernels']} kernels"
        )
    calls = f"{prof['launches']} launches, {prof['syncs']} syncs, {prof['copies']} copies"
    ops = ", ".join(f"{o['name']} {o['self_ms']:.1f} ms ({o['share']:.0%})" for o in prof["top"][:top])
    return f"    profile: {head}; {calls}; top by {prof['top_by']}: {ops}"


def shared_line(r: dict) -> str:
    """A round of runs sharing the device in one line."""
    head = f"{r['size']:<11}{r['objective']:<14}{r['runs']} at once"
    if "error" in r:
        return f"{head}  error: {r['error'][:200]}"
    mfu = f", MFU {r['mfu']:.1%}" if r["mfu"] is not None else ""
    each = ", ".join(f"{m:.1f}" for m in r["ms_per_update_each"])
    return f"{head}: ms per update of each {each}; together {r['updates_per_s']:.2f} updates/s{mfu}"


def shared_summary(shared: list[dict], rows: list[dict]) -> list[dict]:
    """Per (size, objective): the updates per second of k runs together, their gain over one run alone, and how the
    round of one run agrees with the eager device-path row (measure_device.one_run_agreement: `agrees` false, the
    gains are no measure of sharing, and paper_cost uses none of them)."""
    agreement = one_run_agreement(shared, rows)
    out = []
    for key in dict.fromkeys((r["size"], r["objective"]) for r in shared):
        mine = {
            r["runs"]: r["updates_per_s"] for r in shared if (r["size"], r["objective"]) == key and "updates_per_s" in r
        }
        one = mine.get(1)
        gain = {k: round(v / one, 2) for k, v in mine.items() if one and k != 1}
        out.append(
            {
                "size": key[0],
                "objective": key[1],
                "updates_per_s": {k: round(v, 2) for k, v in mine.items()},
                "gain_over_one_run": gain,
                "one_run_vs_eager_row": agreement.get(key),
            }
        )
    return out


def agreement_line(s: dict) -> str:
    """A round of one run against its eager row, in one line."""
    a = s["one_run_vs_eager_row"]
    if a is None:
        return "no round of one run or no eager device-path row to compare: the gains are not used"
    verdict = "agree" if a["agrees"] else f"DISAGREE (beyond {SHARED_AGREEMENT:.0%}): the gains are not used"
    ms = f"{a['one_run_ms']:.1f} ms vs its eager row {a['eager_row_ms']:.1f} ms (x{a['ratio']:.2f})"
    return f"one run alone {ms}: {verdict}"


def varlen_line(r: dict) -> str:
    """varlen_check in one line."""
    if "error" in r:
        return f"varlen check: error: {r['error'][:200]}"
    parts = [f"{k} out {r[k]['out_rel']:.1e}, grads {r[k]['grad_rel']:.1e}" for k in ("bidirectional", "causal")]
    verdict = "ok" if r["ok"] else "FAILED"
    head = f"varlen check ({r['kernel']}, tol {r['tol']:g})"
    return f"{head}: {'; '.join(parts)}; dropout finite {r['dropout_finite']}: {verdict}"


def summary(rows: list[dict]) -> list[dict]:
    """Per (size, objective): ms per update of each measured variant and the speed-up of each over the host path."""
    out = []
    for key in dict.fromkeys((r["size"], r["objective"]) for r in rows):
        mine = [r for r in rows if (r["size"], r["objective"]) == key and "ms_per_update" in r]
        ms = {variant(r): round(r["ms_per_update"], 2) for r in mine}
        host = ms.get("host/eager")
        speedup = {k: round(host / v, 2) for k, v in ms.items() if host and k != "host/eager"}
        out.append({"size": key[0], "objective": key[1], "ms_per_update": ms, "speedup_over_host": speedup})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--sizes", nargs="+", default=["bert-mini", "bert-base", "bert-large", "vit-tiny"])
    p.add_argument("--objectives", nargs="+", default=["encoder", "decoder-paper", "decoder"])
    p.add_argument("--captures", nargs="*", default=["cuda-graphs", "compile"], choices=["cuda-graphs", "compile"])
    p.add_argument(
        "--no-varlen", action="store_true", help="no rows with `padded_attention: varlen` (nor the varlen check)"
    )
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=210.0, help="start no row after this many seconds")
    p.add_argument("--config", default=str(REPO / "config" / "paper.yaml"))
    p.add_argument("--group", default="paper")
    p.add_argument("--block-len", type=int, default=512)
    p.add_argument("--pad-rows", type=float, default=0.1)
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--json", metavar="PATH", help="the rows and the summary as JSON (rewritten after each row)")
    p.add_argument(
        "--share-sizes",
        nargs="*",
        default=["vit-tiny", "bert-mini"],
        help="sizes trained as several processes on the device at once, after the eager rows and the first capture "
        "of each size's first objective (that objective, device path, eager; default vit-tiny bert-mini; none: no "
        "rounds)",
    )
    p.add_argument("--share-runs", nargs="+", type=int, default=[1, 8], help="processes per round (default 1 8)")
    p.add_argument("--share-seconds", type=float, default=3.0, help="the timed window of each round (default 3)")
    p.add_argument(
        "--no-profile",
        action="store_true",
        help="profile no row (default: both eager paths of each size's first "
        "objective profile one more update: where its time goes)",
    )
    args = p.parse_args(argv)
    args.share_sizes = [x for x in args.share_sizes if x in args.sizes]
    if args.warmup < 1:
        p.error("--warmup: at least 1 (the first update holds a compile or a graph capture)")
    start = time.monotonic()
    dev = torch.device(args.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    peak = args.peak_tflops * 1e12 if args.peak_tflops else gpu_peak_flops(name) if dev.type == "cuda" else None
    timing = Timing(args.steps, args.warmup, args.block_len, args.pad_rows)
    head = {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "peak_tflops": peak / 1e12 if peak else None,
        "steps": args.steps,
        "warmup": args.warmup,
        "budget_s": args.budget_s,
        "config": args.config,
        "group": args.group,
    }
    print(
        f"gpu_measure: {name} (torch {torch.__version__}, CUDA {torch.version.cuda}), "
        f"peak {head['peak_tflops']} TFLOP/s",
        flush=True,
    )
    text_sizes = [x for x in args.sizes if not x.startswith("vit")]
    if not args.no_varlen and text_sizes:
        try:
            head["varlen_check"] = varlen_check(dev, *text_sizes[:1])
        except Exception as exc:  # noqa: BLE001 - recorded (not ok: paper_cost then counts no varlen row)
            head["varlen_check"] = {"error": f"{type(exc).__name__}: {exc}", "ok": False}
        print(varlen_line(head["varlen_check"]), flush=True)
    print(
        f"{'size':<11}{'objective':<14}{'path':<8}{'capture':<15}{'passes':>7}{'ms/update':>10}{'first ms':>10}"
        f"{'tokens/s':>12}{'MFU':>7}{'syncs':>6}",
        flush=True,
    )
    rows: list[dict] = []
    shared: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        text = write_random_corpus(tmp / "corpus", 30522, args.block_len, pad_rows=args.pad_rows, layout="documents")
        images = write_random_images(tmp / "images")
        setup = Setup(Path(args.config), args.group, timing, dev, peak, tmp)
        rows_planned = plan(args.sizes, args.objectives, args.captures, not args.no_varlen)
        to_profile = set() if args.no_profile else profiled(rows_planned)
        rounds = [
            (s, "classifier" if s.startswith("vit") else args.objectives[0], k)
            for s in args.share_sizes
            for k in args.share_runs
        ]

        def write() -> None:
            if args.json:
                doc = {**head, "rows": rows, "summary": summary(rows), "shared": shared}
                doc["shared_summary"] = shared_summary(shared, rows)
                Path(args.json).write_text(json.dumps(doc, indent=1))

        for item in schedule(rows_planned, rounds, len(args.sizes), bool(args.captures)):
            spent = time.monotonic() - start > args.budget_s
            if len(item) == 3:  # a round of runs sharing the device
                size, objective, k = item
                if spent:
                    r = {
                        "size": size,
                        "objective": objective,
                        "runs": k,
                        "skipped": f"budget of {args.budget_s:g} s spent",
                    }
                else:
                    data = images if objective == "classifier" else text
                    r = measure_shared(size, objective, k, data, setup, args.share_seconds, args.warmup)
                    r["elapsed_s"] = round(time.monotonic() - start, 1)
                    print(shared_line(r), flush=True)
                shared.append(r)
                write()
                continue
            size, objective, path, capture, attention = item
            if spent:
                rows.append(
                    {
                        "size": size,
                        "objective": objective,
                        "batch_path": path,
                        "capture": capture,
                        "padded_attention": attention,
                        "skipped": f"budget of {args.budget_s:g} s spent",
                    }
                )
                continue
            data = images if objective == "classifier" else text
            r = measure(size, objective, path, capture, data, setup, item in to_profile, attention)
            r["elapsed_s"] = round(time.monotonic() - start, 1)
            rows.append(r)
            label = capture + ("+varlen" if attention == "varlen" else "")
            if "error" in r:
                print(f"{size:<11}{objective:<14}{path:<8}{label:<15}  error: {r['error'][:200]}", flush=True)
            else:
                mfu = f"{r['mfu']:7.1%}" if r["mfu"] is not None else f"{'-':>7}"
                syncs = "-" if r["syncs_per_update"] is None else str(r["syncs_per_update"])
                print(
                    f"{size:<11}{objective:<14}{path:<8}{label:<15}{r['device_passes']:>7}"
                    f"{r['ms_per_update']:10.1f}{r['first_ms']:10.0f}{r['tokens_per_s']:12,.0f}{mfu}{syncs:>6}",
                    flush=True,
                )
                if "profile" in r:
                    print(profile_line(r["profile"]), flush=True)
            write()
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        write()
    print("\nspeed-up over the host path (ms per update):")
    for s in summary(rows):
        print(f"  {s['size']:<11}{s['objective']:<14}{s['ms_per_update']}  {s['speedup_over_host']}")
    print("runs sharing the device (updates per second of all together; gain over one run alone):")
    for s in shared_summary(shared, rows):
        print(f"  {s['size']:<11}{s['objective']:<14}{s['updates_per_s']}  {s['gain_over_one_run']}")
        print(f"    {agreement_line(s)}")
    print(f"gpu_measure: {len(rows)} rows and {len(shared)} rounds of shared runs in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
