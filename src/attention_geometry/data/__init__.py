"""Corpora prepared once into tokenized fixed-length blocks (`attention-geometry prepare-corpus`,
docs/data.md). The format itself (the files, the manifest, the one reader) is attention_geometry.formats.corpus.

    corpus_config.py  CorpusConfig (CORPUS.yaml) and its validator, the bounds config/schema.yaml repeats
    sources.py        one reader per text dataset kind: wiki_offline, text_files, jigsaw, wikipedia, red_pajama
                      (the hub datasets: their fetched parquet files)
    wordpiece.py      the tokenizer: a deterministic WordPiece learner, or a pretrained tokenizer
    blocks.py         the cleaned-document cache, encoding, the block writer
    prepare.py        prepare_corpus (split, tokenize, write, swap in atomically) and the CLI
    hub_data.py       what a config reads from the Hugging Face hub, the fetch into a folder with a manifest, and
                      the offline reader of that folder (FetchedData)
    fetch.py          the CLI `attention-geometry fetch-hub-data` (run on a host with internet)
    image_config.py   ImageConfig (IMAGES.yaml) and its validator, the bounds config/schema.yaml repeats
    images.py         prepare_images: digits / CIFAR-10 / ImageNet-1k, the stratified held-out split, the CLI
                      `attention-geometry prepare-images` (the format: formats.corpus.load_images)
"""
