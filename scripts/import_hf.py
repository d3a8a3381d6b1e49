#!/usr/bin/env python3
"""import_hf.py: a Hugging Face GPT-2 directory (config.json + model.safetensors) as an llm.c checkpoint that
the trainer starts from (--model FILE).

  python3 scripts/import_hf.py gpt2_hf/ gpt2_124M.bin

reads GPT-2's released weights (huggingface.co/openai-community/gpt2: config.json, model.safetensors) or a
directory scripts/export_hf.py or transformers' save_pretrained wrote: F32 tensors give a checkpoint of
version 3 (FP32), BF16 ones version 5 (BF16), F16 ones version 3 (widened exactly). The vocabulary is padded
to a multiple of 128 with zero rows, as llm.c does; the weight matrices are transposed back to (out, in);
GPT-2's attention-mask buffers are skipped; a lm_head.weight must equal wte. The checkpoint carries its
checksum. Any bad input: one line "error: ..." naming the file, what was expected and what was found, exit
1, nothing written under the output's name. docs/huggingface.md has more."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2  # noqa: E402
import llmc_checkpoint as ck  # noqa: E402
from safetensors_np import BadFile  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("hf_dir", help="directory with config.json and model.safetensors")
    p.add_argument("checkpoint", help="the llm.c checkpoint to write")
    a = p.parse_args()
    try:
        c, version, params = hf_gpt2.from_hf(a.hf_dir)
        ck.write(a.checkpoint, c, version, params)
    except BadFile as e:
        sys.exit("error: import_hf: %s" % e)
    print("import_hf: %s -> %s (version %d, L=%d NH=%d C=%d V=%d Vp=%d maxT=%d)"
          % (a.hf_dir, a.checkpoint, version, c["L"], c["NH"], c["C"], c["V"], c["Vp"], c["maxT"]))


if __name__ == "__main__":
    main()
