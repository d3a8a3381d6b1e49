#!/usr/bin/env python3
"""export_hf.py: an llm.c checkpoint (model_<step>.bin, FP32 or BF16) as a Hugging Face GPT-2 directory.

  python3 scripts/export_hf.py out/model_00000100.bin hf_out/ [--eot ID]

writes hf_out/config.json (GPT2LMHeadModel's fields) and hf_out/model.safetensors (scripts/hf_gpt2.py says
how the layouts differ: the linears transposed, the vocabulary's padding dropped, the head tied to wte), which
transformers' GPT2LMHeadModel.from_pretrained("hf_out") loads. A checkpoint with a checksum is verified
first. Any bad input: one line "error: ..." naming the file, what was expected and what was found, exit 1,
and no file written under its name (each goes through a temporary name). docs/huggingface.md has more."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2  # noqa: E402
from safetensors_np import BadFile  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="llm.c model checkpoint (version 3 = FP32 or 5 = BF16)")
    p.add_argument("out_dir", help="directory for config.json and model.safetensors (created if missing)")
    p.add_argument("--eot", type=int, default=None, help="the end-of-text token id for config.json (default V - 1, "
                   "50256 for GPT-2's vocabulary)")
    a = p.parse_args()
    try:
        c, verified = hf_gpt2.export(a.checkpoint, a.out_dir, a.eot)
    except BadFile as e:
        sys.exit("error: export_hf: %s" % e)
    print("export_hf: %s (%s, L=%d NH=%d C=%d V=%d maxT=%d) -> %s/config.json, model.safetensors"
          % (a.checkpoint, "checksum verified" if verified else "no checksum: read unverified", c["L"], c["NH"],
             c["C"], c["V"], c["maxT"], a.out_dir))


if __name__ == "__main__":
    main()
