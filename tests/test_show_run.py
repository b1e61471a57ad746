"""`attention-geometry show-run`: a planned run's settings from the workflow config alone. What it prints as known
is compared with what the trainer itself resolves once the data exists (the workflow's RUN.yaml of that run,
resolved on a prepared corpus of the config's block length and vocabulary: training.run_config.resolve_run, the
values run.yaml records), and with the config's own numbers read here; what it marks as the corpus's is exactly
what that resolution fills in from the corpus. An unknown run is one line with its close matches."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO, cli_in_process, config_plan, validated_config, write_random_corpus

from attention_geometry.formats.corpus import load_corpus
from attention_geometry.training.run_config import load_run_config, resolve_run

CONFIG = REPO / "config" / "study2.yaml"


def show(run: str, configfile: Path = CONFIG) -> dict:
    code, out, err = cli_in_process(["show-run", run, "--configfile", configfile])
    assert code == 0, err
    assert out.startswith(f"# {run} as planned by {configfile}")
    return yaml.safe_load(out)


def _corpus(path: Path, block_len: int, vocab: int, heldout: int, layout: str | None) -> Path:
    write_random_corpus(path, n_train=4, n_heldout=heldout, block_len=block_len, vocab=vocab)
    if layout:
        manifest = json.loads((path / "manifest.json").read_text())
        (path / "manifest.json").write_text(json.dumps({**manifest, "layout": layout}))
    return path


@pytest.mark.parametrize(
    "configfile, run, block_len, vocab, layout",
    [
        ("config.yaml", "tiny-4l-wiki_offline-encoder-standard-s5009", 64, 2048, None),
        ("study2.yaml", "tiny-wiki_offline-encoder-symmetric-fresh-s3000", 64, 2048, None),
        ("study2.yaml", "tiny-wiki_offline-decoder-paper-standard-s3001", 64, 2048, None),
        ("study2.yaml", "tiny-wiki_offline-decoder-symmetric-fresh-s3007", 64, 2048, None),
        ("paper.yaml", "bert-mini-wikipedia-decoder-paper-symmetric-fresh-s0", 512, 30522, "documents"),
    ],
)
def test_what_it_prints_is_what_the_trainer_resolves(tmp_path, configfile, run, block_len, vocab, layout):
    shown = show(run, REPO / "config" / configfile)
    # the workflow's RUN.yaml of this run (rule write_run_config), on a corpus of the config's shape
    plan = config_plan(validated_config(configfile))
    raw = yaml.safe_load(plan.run_yaml(run))
    assert shown["data"] == raw["corpus"]
    corpus = _corpus(tmp_path / "corpus", block_len, vocab, heldout=shown["eval_blocks"] + 3, layout=layout)
    (tmp_path / "RUN.yaml").write_text(yaml.safe_dump({**raw, "corpus": str(corpus)}))
    resolved = resolve_run(load_run_config(tmp_path / "RUN.yaml"), load_corpus(corpus))
    record = resolved.as_run_yaml()
    for key in ("run", "size", "objective", "init", "seed", "max_steps", "snapshot_steps", "eval_steps"):
        assert shown[key] == record[key], key
    for key in ("eval_blocks", "state_every", "log_every", "regularizer"):
        assert shown[key] == record[key], key
    assert Path(shown["data"]).name == shown["dataset"] and shown["dataset"] in plan.corpora
    hyper = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(resolved.hyper).items()}
    from_corpus = shown["from_corpus"]
    assert {k: hyper[k] for k in shown["hyper"]} == shown["hyper"]
    # every Hyper field a text run has is either known or the corpus's; the corpus's are what the corpus gave
    assert set(shown["hyper"]) | set(from_corpus) == set(hyper) - {"patch_size"}
    assert not set(shown["hyper"]) & set(from_corpus)
    filled = {"vocab_size": vocab, "seq_len": block_len}
    assert {k: hyper[k] for k in from_corpus} == {k: filled[k] for k in from_corpus}
    if "seq_len" in from_corpus:
        assert f"block_len of the prepared corpus, {block_len} (config corpora." in from_corpus["seq_len"]


def test_the_numbers_are_the_configs():
    """Read off config/study2.yaml by hand: the main group's settings, the entry's max_steps and overrides, the
    size's shape."""
    cfg = yaml.safe_load(CONFIG.read_text())["training"]["groups"]["main"]
    settings = cfg["settings"]
    entry = next(e for e in cfg["runs"] if e["objective"] == "encoder" and e.get("max_steps"))
    shown = show("tiny-wiki_offline-encoder-fresh-s3004")
    assert shown["groups"] == ["main"] and shown["seed"] == 3004 and shown["init"] == "fresh"
    assert shown["max_steps"] == shown["hyper"]["max_steps"] == entry["max_steps"] == 2500
    step = settings["snapshot_every"]
    assert shown["snapshot_steps"] == list(range(0, entry["max_steps"] + 1, step))
    assert shown["eval_steps"] == list(range(0, entry["max_steps"] + 1, settings["eval_every"]))
    assert shown["log_every"] == settings["log_every"] and shown["eval_blocks"] == settings["eval_blocks"]
    assert shown["overrides"] == entry["overrides"]
    for key, value in entry["overrides"].items():
        assert shown["hyper"][key] == value
    assert (shown["hyper"]["num_layers"], shown["hyper"]["hidden_size"], shown["hyper"]["num_heads"]) == (2, 128, 2)
    tokenizer = yaml.safe_load(CONFIG.read_text())["corpora"]["wiki_offline"]["tokenizer"]
    assert f"at most {tokenizer['vocab_size']} tokens" in shown["from_corpus"]["vocab_size"]


def test_an_image_run_marks_the_image_sets_values():
    shown = show("vit-tiny-digits-classifier-symmetric-s1002")
    assert set(shown["from_images"]) == {"image_size", "num_channels", "num_classes"} and "from_corpus" not in shown
    assert "patch_size" in shown["hyper"]
    assert not {"vocab_size", "seq_len", "mlm_probability"} & set(shown["hyper"])
    assert shown["eval_steps"] == list(range(0, 1501, 50)) and shown["groups"] == ["vision"]


def test_an_unknown_run_is_one_line_with_its_close_matches():
    code, out, err = cli_in_process(["show-run", "tiny-wiki_offline-encoder-standard-s300", "--configfile", CONFIG])
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ")
    assert "no planned run 'tiny-wiki_offline-encoder-standard-s300'" in err and "close matches: " in err
    assert "tiny-wiki_offline-encoder-standard-s3000" in err
    code, _, err = cli_in_process(["show-run", "gpt-7b", "--configfile", CONFIG])
    assert code == 2 and err.count("\n") == 1 and "its runs are named like tiny-wiki_offline-" in err


def test_a_bad_config_is_one_line(tmp_path):
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["training"]["groups"]["main"]["runs"][0]["overrides"]["lr_max"] = 1.0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    code, _, err = cli_in_process(["show-run", "tiny-wiki_offline-encoder-standard-s3000", "--configfile", bad])
    assert code == 2 and err.count("\n") == 1 and "overrides.lr_max: unknown hyperparameter" in err
    code, _, err = cli_in_process(["show-run", "x", "--configfile", tmp_path / "none.yaml"])
    assert code == 2 and err == f"error: workflow config not found: {tmp_path / 'none.yaml'}\n"


def test_it_reads_no_torch():
    code = (
        "import sys, contextlib, io\n"
        "from attention_geometry.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    argv = ['show-run', 'tiny-wiki_offline-decoder-standard-s3000', '--configfile', {str(CONFIG)!r}]\n"
        "    assert main(argv) == 0\n"
        "assert 'torch' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_list_prints_every_planned_run_and_nothing_else():
    """Issue 58.7: `show-run --list` prints the config's planned runs, one per line; here against the names
    written out from the config's run entries (each entry the product of its lists; the corpus key is the dataset
    part, which in this config is the corpus key itself)."""
    import itertools

    cfg = yaml.safe_load(CONFIG.read_text())
    names = set()
    for group in cfg["training"]["groups"].values():
        for entry in group["runs"]:
            lists = [entry[k] if isinstance(entry[k], list) else [entry[k]] for k in ("size", "corpus", "objective")]
            lists += [entry[k] if isinstance(entry[k], list) else [entry[k]] for k in ("init", "seed")]
            names |= {f"{s}-{c}-{o}-{i}-s{n}" for s, c, o, i, n in itertools.product(*lists)}
    code, out, err = cli_in_process(["show-run", "--list", "--configfile", CONFIG])
    assert code == 0 and err == "" and out.splitlines() == sorted(names)
    code, out, err = cli_in_process(["show-run", "--configfile", CONFIG])
    assert code == 2 and out == "" and err.count("\n") == 1 and "--list" in err
