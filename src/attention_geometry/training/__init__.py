"""Training BERT encoders (masked LM) and decoders (causal LM) from scratch under four self-attention
initializations, with weight snapshots, a loss log and bitwise resume; the same for ViT image classifiers
(objective `classifier`). See docs/training.md.

    hyper.py       Hyper, the named sizes, their bounds and enums (torch-free: the workflow checks them at parse time)
    run_config.py  RUN.yaml, its validation, the resolved run (run.yaml)
    models.py      the model, the four initializations, the training forward and loss
    vit.py         the ViT image classifier: model, the same inits on its q/k/v, image batches, loss, accuracy
    batches.py     learning-rate schedule, example order, masked-LM batches
    step.py        the one update (Step) and its host source (HostBatches); the optimizer
    device_path.py the device source (batch_path: device): batches and masks on the GPU, few static passes
    loop.py        the thin driver (Trainer) and train(): checks, resume, stop, logging, evaluation, DDP
    losslog.py     loss.csv as the loop fills it
    evaluate.py    the held-out loss
    cost.py        model FLOPs of an update, the peak, tokens/s and MFU in train.log
    measure.py     timing the loop's own update for the benchmarks: random data, the recipe's rows, profiles
    measure_device.py  the two batch sources side by side on a device, runs sharing it, the varlen check
    snapshots.py   what a run writes: run.yaml, loss.csv, weight snapshots, the resumable state
    model_card.py  a snapshot's README.md
    run_provenance.py  provenance.csv: the code, the steps, the host and the speed of each start
    runtime.py     device, precision, threads, the heap setting for large temporaries
    budget.py      stopping early with the state saved: the time limit (--time-limit), SIGTERM, exit status 75
    launch.py      how the workflow starts the trainer (torchrun per GPU, srun + torchrun per node; torch-free)
    command.py     CLI `attention-geometry train`
    share.py       CLI `attention-geometry train-shared`: several runs as processes on one device (torch-free)
"""
