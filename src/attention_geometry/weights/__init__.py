"""Where q/k weights come from: local folders, safetensors, PyTorch .bin, GGUF and the hub (by byte ranges).

base.py            TensorSource, StateDictSource, LoadError: the base types every source implements
safetensors_io.py  the safetensors format: the header reader, a streaming source, a streaming writer
hub.py             HTTP range reads of a hub file at a commit
gguf_qk.py         a GGUF file's header and only its q/k tensors, dequantized
loading.py         open_source: the one entry point that picks a source for a path, a hub id or a model
prefetch.py        a hub model's q/k subset and config into a local folder (CLI `prefetch-qk`)
"""
