"""Corpora prepared once into tokenized fixed-length blocks (`attention-geometry prepare-corpus`,
docs/data.md). The format itself (the files, the manifest, the one reader) is attention_geometry.formats.corpus.

    corpus_config.py  CorpusConfig (CORPUS.yaml) and its validator, the bounds config/schema.yaml repeats
    sources.py        one reader per text dataset kind: wiki_offline, text_files, jigsaw, wikipedia, red_pajama
    wordpiece.py      the tokenizer: a deterministic WordPiece learner, or a pretrained tokenizer
    blocks.py         the cleaned-document cache, encoding, the block writer
    prepare.py        prepare_corpus (split, tokenize, write, swap in atomically) and the CLI
    image_config.py   ImageConfig (IMAGES.yaml) and its validator, the bounds config/schema.yaml repeats
    images.py         prepare_images: digits / CIFAR-10 / ImageNet-1k, the stratified held-out split, the CLI
                      `attention-geometry prepare-images` (the format: formats.corpus.load_images)
"""
