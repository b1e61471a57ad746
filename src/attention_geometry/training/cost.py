"""The one cost model of training: model FLOPs of an update from a run's shape, the device's peak, and from both the
throughput a run logs (tokens/s and MFU in train.log; docs/training.md, "Throughput").

FLOPs count 2 per multiply-add of the matrix products, forward and backward (backward: twice the forward, the
gradients of the inputs and of the weights), so an update costs 3 x its forward:
- per position and layer, the four attention maps and the two MLP maps: 2 (4 d^2 + 2 d i);
- per position and layer, the attention products Q K^T and P V over all n keys: 4 n d (a causal mask skips none
  of them in the kernels that run here);
- per position through the output layer (the labelled ones: masked positions of an encoder and `decoder-paper`,
  every next token of a decoder): the head's transform and the vocabulary map, 2 (d^2 + d V);
- a ViT: its patch embedding, 2 C p^2 d per patch (backward: its weights' gradient alone), and its classifier,
  2 d K on the [CLS] position alone.
Norms, activations, softmax and the optimizer are left out (their share is small and they are not matrix work).
tests/test_cost.py checks the count against torch's FlopCounterMode on the CPU.

The peak: on a CPU, the fp32 matrix-product rate measured here once per process at the thread count of the run
(`measured_cpu_peak`); on a GPU, the dense peak of the card's name from GPU_PEAK_TFLOPS (None for a card not in it:
the MFU is then not given)."""

from __future__ import annotations

import functools
import time

__all__ = [
    "GPU_PEAK_TFLOPS",
    "update_flops",
    "update_flops_parts",
    "expected_predicted",
    "sequence_positions",
    "gpu_peak_flops",
    "measured_cpu_peak",
    "peak_flops",
    "Throughput",
]

# dense peak TFLOP/s of known GPUs by a part of their torch device name: (bf16 / fp16 tensor cores, fp32 without
# tensor cores), the vendors' data sheets (SXM parts; H200 and H100 share their compute)
GPU_PEAK_TFLOPS = {
    "H200": (989.0, 67.0),
    "H100": (989.0, 67.0),
    "A100": (312.0, 19.5),
    "L40S": (362.0, 91.6),
    "A10": (125.0, 31.2),
    "V100": (125.0, 15.7),
}


def sequence_positions(h, objective: str, image_size: int | None = None) -> int:
    """The positions of one sequence: a text run's block (seq_len), a ViT's patches and its [CLS]."""
    if objective == "classifier":
        return (int(image_size) // int(h.patch_size)) ** 2 + 1
    return int(h.seq_len)


def expected_predicted(h, objective: str, n: int) -> float:
    """Positions through the output layer per sequence of n: the expected masked ones of an encoder or
    `decoder-paper` ([CLS] and [SEP] are never masked), n - 1 next tokens of a decoder, 1 for a classifier."""
    if objective == "classifier":
        return 1.0
    if objective == "decoder":
        return float(n - 1)
    return h.mlm_probability * (n - 2)


def update_flops_parts(
    h,
    objective: str,
    n: int,
    predicted: float | None = None,
    *,
    sequences: int | None = None,
    num_channels: int = 3,
    num_labels: int = 10,
) -> dict[str, float]:
    """update_flops by where they go: `layers` (the attention and MLP maps), `attention` (Q K^T and P V), `output`
    (the output layer at the predicted positions: a text model's head and vocabulary map, a ViT's classifier) and
    `patches` (a ViT's patch embedding; 0 for text)."""
    B = h.batch_size if sequences is None else sequences
    d, i, layers = h.hidden_size, h.intermediate_size, h.num_layers
    if predicted is None:
        predicted = B * expected_predicted(h, objective, n)
    out = {
        "layers": 3.0 * B * n * layers * 2 * (4 * d * d + 2 * d * i),
        "attention": 3.0 * B * n * layers * 4 * n * d,
        "patches": 0.0,
    }
    if objective == "classifier":  # the patch embedding's backward is its weights' alone (pixels need no gradient)
        out["output"] = 3.0 * predicted * 2 * d * num_labels
        out["patches"] = 2.0 * B * (n - 1) * 2 * num_channels * h.patch_size**2 * d
    else:
        out["output"] = 3.0 * predicted * 2 * (d * d + d * h.vocab_size)
    return out


def update_flops(h, objective: str, n: int, predicted: float | None = None, **shape) -> float:
    """Model FLOPs of one update of `sequences` (default h.batch_size) sequences of `n` positions, forward and
    backward; `predicted`: positions through the output layer in all of them (default: expected_predicted); `shape`:
    update_flops_parts's keywords (sequences, a ViT's num_channels and num_labels)."""
    return sum(update_flops_parts(h, objective, n, predicted, **shape).values())


def gpu_peak_flops(device_name: str, amp: bool = True) -> float | None:
    """The dense peak FLOP/s of a GPU by name (GPU_PEAK_TFLOPS): tensor-core bf16/fp16 under autocast, else fp32;
    None for a card not in the table."""
    for key, (low, fp32) in GPU_PEAK_TFLOPS.items():
        if key in device_name:
            return (low if amp else fp32) * 1e12
    return None


@functools.lru_cache(maxsize=8)
def measured_cpu_peak(threads: int, size: int = 384, seconds: float = 0.01, loops: int = 20) -> float:
    """FLOP/s of fp32 torch.mm of two size x size matrices on this CPU at `threads` threads: the best of `loops`
    short loops of at least `seconds` each (on a host shared with other work, the best of many short loops is the
    least slowed), measured once per process and thread count. It draws no random number: it leaves the
    generators (and so the run) as they are."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.full((size, size), 0.5)
        b = torch.full((size, size), 0.25)
        torch.mm(a, b)
        best = 0.0
        for _ in range(loops):
            k, t0 = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - t0) < seconds or k == 0:
                torch.mm(a, b)
                k += 1
            best = max(best, 2.0 * size**3 * k / elapsed)
        return best
    finally:
        torch.set_num_threads(before)


def peak_flops(device, amp: bool) -> float | None:
    """The peak FLOP/s that MFU divides by, for a torch device: measured on a CPU, by name on a GPU."""
    import torch

    if device.type == "cuda":
        return gpu_peak_flops(torch.cuda.get_device_name(device), amp)
    if device.type == "cpu":
        return measured_cpu_peak(torch.get_num_threads())
    return None


class Throughput:
    """What train.log says of a run's speed: at each log step the tokens (positions) per second and the MFU (model
    FLOPs per second over `peak`, None: not given) since the previous log step, and their means over the loop.
    `flops` and `tokens`: one update's (all processes'); `peak`: all processes' devices together; `start`: the step
    the loop starts after (a resumed run's)."""

    def __init__(self, flops: float, tokens: int, peak: float | None, start: int = 0, clock=time.perf_counter):
        self.flops, self.tokens, self.peak, self.clock = flops, tokens, peak, clock
        self.started = self.last = clock()
        self.first = self.steps = start

    def line(self, step: int) -> str:
        """`step S: X tokens/s, MFU Y %` for the updates since the previous call (or the start)."""
        now = self.clock()
        n, seconds = step - self.steps, now - self.last
        self.last, self.steps = now, step
        return f"step {step}: {self.describe(n, seconds)}"

    def mean(self, step: int) -> str:
        """The means over every update from the start to `step`."""
        return self.describe(step - self.first, self.clock() - self.started)

    def mean_rates(self, step: int) -> tuple[float, float | None]:
        """(tokens/s, MFU) over every update from the start to `step` (rates)."""
        return self.rates(step - self.first, self.clock() - self.started)

    def rates(self, n: int, seconds: float) -> tuple[float, float | None]:
        """(tokens/s, MFU as a fraction or None) of `n` updates in `seconds`."""
        seconds = max(seconds, 1e-9)
        mfu = n * self.flops / seconds / self.peak if self.peak else None
        return n * self.tokens / seconds, mfu

    def describe(self, n: int, seconds: float) -> str:
        tokens_s, mfu = self.rates(n, seconds)
        return f"{tokens_s:,.0f} tokens/s, MFU " + (f"{100 * mfu:.2f} %" if mfu is not None else "n/a (peak unknown)")
