"""Peak memory and wall time of scoring a ~1B-parameter checkpoint: streaming reader vs full load.

Writes a random Llama-shaped checkpoint (bf16, sharded safetensors with an index, default 16 layers,
width 2048, 32 query heads, 8 key/value heads, MLP 8192, vocabulary 32000: 1.10 B parameters, 2.2 GB) into
a temporary folder, then scores it twice, each time in a fresh child process:

- streaming: attention_geometry.scoring.scorer.score_model(<folder>), which reads only the q/k tensors;
- full: transformers.AutoModelForCausalLM.from_pretrained(<folder>, dtype=bfloat16), then score_model(model).

For each child it prints the wall time of the whole process (python start, imports, scoring) and its peak
resident set size (os.wait4's ru_maxrss of that child), the RSS the child had after its imports (before
reading any weight), and the ratios streaming / full. The two score tables must agree exactly.

    .venv/bin/python benchmarks/score_memory.py            # the default ~1B checkpoint
    .venv/bin/python benchmarks/score_memory.py --layers 2 --width 256 --heads 4 --kv-heads 2 \
        --intermediate 512 --vocab 1000                    # a quick check that it runs

The page cache is warm for both children (the checkpoint was just written), so the comparison is of what
each path reads and keeps, not of disk speed. Both children use --threads torch threads.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_checkpoint(out: Path, a: argparse.Namespace) -> int:
    """A random Llama checkpoint written shard by shard (never the whole model in memory); returns n_params."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    d, dh = a.width, a.width // a.heads
    cfg = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=d,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=dh,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    cfg.save_pretrained(out)

    def rand(*shape):
        return (torch.randn(*shape, dtype=torch.float32) * 0.02).to(torch.bfloat16)

    def layer(i):
        p = f"model.layers.{i}."
        return {
            p + "self_attn.q_proj.weight": rand(a.heads * dh, d),
            p + "self_attn.k_proj.weight": rand(a.kv_heads * dh, d),
            p + "self_attn.v_proj.weight": rand(a.kv_heads * dh, d),
            p + "self_attn.o_proj.weight": rand(d, a.heads * dh),
            p + "mlp.gate_proj.weight": rand(a.intermediate, d),
            p + "mlp.up_proj.weight": rand(a.intermediate, d),
            p + "mlp.down_proj.weight": rand(d, a.intermediate),
            p + "input_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
        }

    # shards: the embedding, `layers_per_shard` layers each, then the final norm and the LM head; each
    # shard's tensors are generated when it is written
    shards = [[lambda: {"model.embed_tokens.weight": rand(a.vocab, d)}]]
    for s in range(0, a.layers, a.layers_per_shard):
        shards.append([lambda i=i: layer(i) for i in range(s, min(a.layers, s + a.layers_per_shard))])
    shards.append(
        [lambda: {"model.norm.weight": torch.ones(d, dtype=torch.bfloat16), "lm_head.weight": rand(a.vocab, d)}]
    )
    weight_map, n_params, total_bytes = {}, 0, 0
    for j, shard in enumerate(shards):
        name = f"model-{j + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {k: v for make in shard for k, v in make().items()}
        save_file(tensors, str(out / name), metadata={"format": "pt"})
        for k, v in tensors.items():
            weight_map[k] = name
            n_params += v.numel()
            total_bytes += v.numel() * v.element_size()
        del tensors
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total_bytes}, "weight_map": weight_map}, indent=1)
    )
    return n_params


def child(mode: str, folder: str, result: str, threads: int) -> None:
    """Score `folder` one way; write timings and the RSS after imports to `result` (JSON)."""
    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(threads)
    from attention_geometry.scoring.scorer import score_model

    if mode == "full":
        from transformers import AutoModelForCausalLM

    rss_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t1 = time.perf_counter()
    if mode == "streaming":
        from attention_geometry.weights.loading import open_source

        src = open_source(folder, name="bench")  # config (transformers) + safetensors headers
    else:
        src = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    t_load = time.perf_counter() - t1
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    df = score_model(src, progress=False, name="bench")
    t2 = time.perf_counter()
    df.to_csv(result + ".csv", index=False)
    info = {
        "imports_s": t1 - t0,
        "score_s": t2 - t1,
        "load_s": t_load,
        "rss_after_imports_kib": rss_imports,
        "rss_after_load_kib": rss_loaded,
    }
    Path(result).write_text(json.dumps(info))


def read_csv(path: str) -> list[dict]:
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_child(mode: str, folder: Path, threads: int, tmp: Path) -> dict:
    result = tmp / f"{mode}.json"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", mode, str(folder), str(result), "--threads", str(threads)], env=env
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"error: the {mode} child failed with exit status {proc.returncode}")
    info = json.loads(result.read_text())
    info.update(
        mode=mode,
        wall_s=wall,
        peak_rss_mib=usage.ru_maxrss / 1024,
        rss_after_imports_mib=info.pop("rss_after_imports_kib") / 1024,
        rss_after_load_mib=info.pop("rss_after_load_kib") / 1024,
        table=str(result) + ".csv",
    )
    return info


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--layers-per-shard", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="torch threads in every process (default 1)")
    p.add_argument("--tmp", default=None, help="folder for the temporary checkpoint (default: system temp)")
    p.add_argument("--write", metavar="FOLDER", help=argparse.SUPPRESS)
    p.add_argument("--child", nargs=3, metavar=("MODE", "FOLDER", "RESULT"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.child[2], a.threads)
        return

    if a.write:
        print(write_checkpoint(Path(a.write), a))
        return

    # This parent process imports neither torch nor pandas: Linux carries a process's peak RSS across
    # fork + exec into the child's ru_maxrss, so a heavy parent would inflate both children's figures.
    with tempfile.TemporaryDirectory(prefix="score-memory-", dir=a.tmp) as tmp:
        tmp = Path(tmp)
        ckpt = tmp / "llama"
        ckpt.mkdir()
        t0 = time.perf_counter()
        argv = [
            f"--{k.replace('_', '-')}={getattr(a, k)}"
            for k in ("layers", "width", "heads", "kv_heads", "intermediate", "vocab", "layers_per_shard", "threads")
        ]
        out = subprocess.run(
            [sys.executable, __file__, "--write", str(ckpt)] + argv, check=True, capture_output=True, text=True
        ).stdout
        n_params = int(out.strip().splitlines()[-1])
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
        print(
            f"checkpoint: {n_params / 1e9:.3f} B parameters, {size / 2**30:.2f} GiB bf16 in "
            f"{len(list(ckpt.glob('*.safetensors')))} shards ({a.layers} layers, width {a.width}, "
            f"{a.heads} heads, {a.kv_heads} KV heads), written in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        res = {m: run_child(m, ckpt, a.threads, tmp) for m in ("streaming", "full")}
        s, f = res["streaming"], res["full"]
        ta, tb = read_csv(s["table"]), read_csv(f["table"])
        same = [{k: v for k, v in r.items() if k != "n_params"} for r in ta] == [
            {k: v for k, v in r.items() if k != "n_params"} for r in tb
        ]
        print(
            "peak RSS after: imports = torch + attention_geometry (+ the transformers auto class); load = "
            "config + safetensors headers (streaming) or from_pretrained (full); peak = the whole run"
        )
        print(
            f"{'path':<10} {'wall s':>7} {'load s':>7} {'load+score s':>13} {'imports MiB':>12} "
            f"{'load MiB':>9} {'peak MiB':>9}"
        )
        for r in (s, f):
            print(
                f"{r['mode']:<10} {r['wall_s']:7.1f} {r['load_s']:7.1f} {r['score_s']:13.1f} "
                f"{r['rss_after_imports_mib']:12.0f} {r['rss_after_load_mib']:9.0f} {r['peak_rss_mib']:9.0f}"
            )
        print(
            f"ratios streaming / full: peak RSS {s['peak_rss_mib'] / f['peak_rss_mib']:.2f}x, "
            f"wall time {s['wall_s'] / f['wall_s']:.2f}x"
        )
        print(
            f"scores identical on both paths: {same}; n_params streaming {ta[0]['n_params']}, full {tb[0]['n_params']}"
        )
        if not same:
            sys.exit("error: the streaming and full-load scores differ")


if __name__ == "__main__":
    main()
