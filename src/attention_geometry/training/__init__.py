"""Training BERT encoders (masked LM) and decoders (causal LM) from scratch under four self-attention
initializations, with weight snapshots, a loss log and bitwise resume; the same for ViT image classifiers
(objective `classifier`). See docs/training.md.

    hyper.py       Hyper, the named sizes, their bounds and enums (torch-free: the workflow checks them at parse time)
    run_config.py  RUN.yaml, its validation, the resolved run (run.yaml)
    models.py      the model, the four initializations, the training forward and loss
    vit.py         the ViT image classifier: model, the same inits on its q/k/v, image batches, loss, accuracy
    batches.py     learning-rate schedule, example order, masked-LM batches
    snapshots.py   what a run writes: run.yaml, loss.csv, weight snapshots, the resumable state
    runtime.py     device, precision, threads, the heap setting for large temporaries
    loop.py        train(): the loop, DDP, resume
    device_path.py the device path (batch_path: device): batches and masks on the GPU, few static passes
    budget.py      stopping early with the state saved: the time limit (--time-limit), SIGTERM, exit status 75
    launch.py      how the workflow starts the trainer (torchrun per GPU, srun + torchrun per node; torch-free)
    command.py     CLI `attention-geometry train`
    share.py       CLI `attention-geometry train-shared`: several runs as processes on one device (torch-free)
"""
