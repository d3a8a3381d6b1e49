"""hf_gpt2.py: an llm.c checkpoint's tensors <-> a Hugging Face GPT-2 directory (config.json + model.safetensors),
what scripts/export_hf.py and scripts/import_hf.py share.

The differences between the two layouts:
- HF's GPT-2 computes its linears with Conv1D, whose weight is stored (in, out); llm.c stores nn.Linear's
  (out, in). The four weight matrices of each layer are transposed on the way (the q, k, v blocks of c_attn
  keep their order: HF splits c_attn's output into q, k, v of C each, as llm.c's qkvw rows are).
- llm.c pads the vocabulary to Vp (a multiple of 128) with zero rows of wte; HF holds V rows.
- the LM head is wte in both (tied): HF's GPT2LMHeadModel ties lm_head.weight to transformer.wte.weight,
  and save_pretrained writes only the latter.
- GPT-2's attention mask buffers (h.N.attn.bias, h.N.attn.masked_bias) are constants, not parameters:
  skipped when read, never written.
The released GPT-2 files name the tensors without the "transformer." prefix that GPT2LMHeadModel writes;
both are read. Everything else about the model must be what this trainer computes (tanh GELU, LayerNorm
eps 1e-5, attention scaled by 1/sqrt(head size), MLP of 4C), or the file is refused."""
import json
import os

import numpy as np

import llmc_checkpoint as ck
import safetensors_np as st
from safetensors_np import BadFile

# llm.c's per-layer tensors and their HF names; True: a weight matrix, transposed between the two
LAYER = [("ln1w", "ln_1.weight", False), ("ln1b", "ln_1.bias", False),
         ("qkvw", "attn.c_attn.weight", True), ("qkvb", "attn.c_attn.bias", False),
         ("attprojw", "attn.c_proj.weight", True), ("attprojb", "attn.c_proj.bias", False),
         ("ln2w", "ln_2.weight", False), ("ln2b", "ln_2.bias", False),
         ("fcw", "mlp.c_fc.weight", True), ("fcb", "mlp.c_fc.bias", False),
         ("fcprojw", "mlp.c_proj.weight", True), ("fcprojb", "mlp.c_proj.bias", False)]
BUFFERS = ("attn.bias", "attn.masked_bias")  # GPT-2's causal-mask constants
# checkpoint version <-> the tensors' dtype in safetensors and config.json
DTYPE = {3: ("F32", "float32"), 5: ("BF16", "bfloat16")}


def hf_config(c, version, eot):
    """config.json of GPT2LMHeadModel for config c: the fields transformers' GPT2Config reads. No dropout (this
    trainer has none: a model trained on in transformers trains as here); eot: the begin/end-of-text token id."""
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": c["V"], "n_positions": c["maxT"], "n_ctx": c["maxT"], "n_embd": c["C"],
            "n_layer": c["L"], "n_head": c["NH"], "n_inner": None, "activation_function": "gelu_new",
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "layer_norm_epsilon": 1e-05,
            "initializer_range": 0.02, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "tie_word_embeddings": True, "use_cache": True,
            "bos_token_id": eot, "eos_token_id": eot, "torch_dtype": DTYPE[version][1]}


def to_hf(path, c, version, params):
    """the HF tensors (a list of (name, dtype, array), in GPT-2's module order) of a checkpoint's params"""
    V = c["V"]
    pad = params["wte"][V:]
    if np.any(pad.view(np.uint32 if version == 3 else np.uint16)):
        row = V + int(np.nonzero(np.any(pad != 0, axis=1))[0][0])
        raise BadFile("%s: expected the padded rows %d..%d of wte to be zero (docs/formats.md), found row %d not zero"
                      % (path, V, c["Vp"] - 1, row))
    dt = DTYPE[version][0]
    out = [("transformer.wte.weight", dt, params["wte"][:V]), ("transformer.wpe.weight", dt, params["wpe"])]
    for i in range(c["L"]):
        for ours, theirs, linear in LAYER:
            a = params[ours][i]
            out.append(("transformer.h.%d.%s" % (i, theirs), dt, a.T if linear else a))
    out += [("transformer.ln_f.weight", dt, params["lnfw"]), ("transformer.ln_f.bias", dt, params["lnfb"])]
    return out


def export(ckpt_path, out_dir, eot=None):
    """writes out_dir/config.json and out_dir/model.safetensors from the checkpoint; returns (config, verified)"""
    c, version, params, verified = ck.read(ckpt_path)
    tensors = to_hf(ckpt_path, c, version, params)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise BadFile("%s: cannot create the directory: %s" % (out_dir, e.strerror or e))
    st.write(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    cfg = hf_config(c, version, c["V"] - 1 if eot is None else eot)
    st.write_atomic(os.path.join(out_dir, "config.json"), [(json.dumps(cfg, indent=2) + "\n").encode()])
    return c, verified


def read_config(path):
    """config.json of a GPT-2 directory -> (maxT V L NH C Vp), refusing what this trainer cannot compute"""
    try:
        with open(path) as f:
            j = json.load(f)
    except OSError as e:
        raise BadFile("%s: cannot read: %s" % (path, e.strerror or e))
    except ValueError as e:
        raise BadFile("%s: expected JSON, found text that does not parse (%s)" % (path, e))
    if not isinstance(j, dict):
        raise BadFile("%s: expected a JSON object, found %s" % (path, type(j).__name__))
    c = {}
    for ours, theirs in (("maxT", "n_positions"), ("V", "vocab_size"), ("L", "n_layer"), ("NH", "n_head"), ("C", "n_embd")):
        v = j.get(theirs)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise BadFile("%s: expected %s, an integer > 0, found %r" % (path, theirs, v))
        c[ours] = v
    c["Vp"] = ck.pad_vocab(c["V"])
    # what the trainer computes, field by field (absent: transformers' default, the same)
    want = [("model_type", ("gpt2",)), ("activation_function", ("gelu_new", "gelu_pytorch_tanh")),
            ("layer_norm_epsilon", (1e-5,)), ("n_inner", (None, 4 * c["C"])), ("scale_attn_weights", (True,)),
            ("scale_attn_by_inverse_layer_idx", (False,)), ("tie_word_embeddings", (True,)),
            ("add_cross_attention", (False,))]
    for key, ok in want:
        if key in j and j[key] not in ok:
            raise BadFile("%s: expected %s to be %s (what this trainer computes), found %r"
                          % (path, key, " or ".join(json.dumps(x) for x in ok), j[key]))
    if c["C"] % c["NH"] != 0:
        raise BadFile("%s: expected n_embd a multiple of n_head, found %d and %d" % (path, c["C"], c["NH"]))
    return c


def from_hf(in_dir):
    """(config, version, params) of the checkpoint for a GPT-2 directory: F32 tensors give version 3, BF16 ones
    version 5, F16 ones version 3 (widened exactly); wte padded with zero rows to Vp"""
    c = read_config(os.path.join(in_dir, "config.json"))
    path = os.path.join(in_dir, "model.safetensors")
    tensors, _ = st.read(path)
    prefix = "transformer." if "transformer.wte.weight" in tensors else ""
    # the parameters' dtype: wte's, which every other parameter must share (the mask buffers may differ)
    dt = tensors[prefix + "wte.weight"][0] if prefix + "wte.weight" in tensors else "F32"
    if dt not in ("F32", "BF16", "F16"):
        raise BadFile("%s: expected the parameters in F32, BF16 or F16, found %s%s in %s" % (path, prefix, "wte.weight", dt))
    version = 5 if dt == "BF16" else 3
    used = set()

    def take(name, shape):
        key = prefix + name
        if key not in tensors:
            raise BadFile("%s: expected a tensor %s of shape %s, found none" % (path, key, list(shape)))
        if tensors[key][0] != dt:
            raise BadFile("%s: tensor %s: expected %s as wte, found %s" % (path, key, dt, tensors[key][0]))
        a = tensors[key][1]
        if a.shape != tuple(shape):
            raise BadFile("%s: tensor %s: expected shape %s (config.json), found %s" % (path, key, list(shape), list(a.shape)))
        used.add(key)
        return a.astype("<f4") if dt == "F16" else a

    L, C, V, Vp = c["L"], c["C"], c["V"], c["Vp"]
    wte = take("wte.weight", (V, C))
    params = {"wte": np.concatenate([wte, np.zeros((Vp - V, C), dtype=wte.dtype)]),
              "wpe": take("wpe.weight", (c["maxT"], C))}
    full = dict(ck.shapes(c))
    for ours, theirs, linear in LAYER:
        rows = []
        for i in range(L):
            s = full[ours][1:]
            a = take("h.%d.%s" % (i, theirs), s[::-1] if linear else s)
            rows.append(a.T if linear else a)
        params[ours] = np.stack(rows)
    params["lnfw"] = take("ln_f.weight", (C,))
    params["lnfb"] = take("ln_f.bias", (C,))
    # what is left: GPT-2's mask buffers, and lm_head.weight if it is wte itself
    for key in tensors:
        if key in used:
            continue
        if key.startswith(prefix + "h.") and key.split(".", 2 + prefix.count("."))[-1] in BUFFERS:
            continue
        if key == "lm_head.weight" and np.array_equal(tensors[key][1], wte):
            continue
        if key == "lm_head.weight":
            raise BadFile("%s: expected lm_head.weight to equal wte (a tied head, as this trainer has), found it different" % path)
        raise BadFile("%s: expected only GPT-2's tensors, found %s" % (path, key))
    return c, version, params
