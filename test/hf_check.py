#!/usr/bin/env python3
"""hf_check.py: the independent side of test/test_hf.sh. Nothing here imports scripts/: the safetensors files are
read by the `safetensors` package where it imports, else by the few lines of read_st below, and the llm.c
checkpoint by offsets written out from docs/formats.md.

  forward HFDIR VAL B T STEPS   GPT-2's forward in float64 numpy from the HF directory (the definitions of
                                Radford et al. 2019 / HF's modeling_gpt2: Conv1D y = x W + b, tanh GELU, LayerNorm
                                eps 1e-5, causal softmax(q k^T / sqrt(hs)), tied head): the mean loss over the
                                first B*STEPS samples of T+1 tokens of the val shard, as the trainer's val loss
                                takes them (llm/train/dataloader.h, unshuffled). Prints the loss.
  torch HFDIR VAL B T STEPS [OUT]  the same loss from transformers' GPT2LMHeadModel in FP32, or "no torch here";
                                then, with OUT, the model saved there by GPT2LMHeadModel.save_pretrained
  qkv CKPT HFDIR                the first layer's q, k, v of 8 random inputs: W x + b with qkvw (3C, C) read from
                                the checkpoint at its offset (docs/formats.md) against x W' + b' with HF's c_attn
  gpt2style HFDIR OUT           HFDIR's model rewritten as GPT-2's released model.safetensors is laid out: names
                                without "transformer.", the attention-mask buffers h.N.attn.bias (1, 1, maxT, maxT) and
                                h.N.attn.masked_bias (0-d), lm_head.weight = wte, keys sorted (by the safetensors package where it imports)
  bad KIND HFDIR OUT            a broken copy of HFDIR: truncated, header (garbage JSON), missing (no
                                h.1.mlp.c_fc.bias), shape (c_attn.weight in llm.c's (3C, C)), untied (lm_head != wte),
                                hole / overlap / trailing (the data not contiguous: 4 bytes unused before the last
                                tensor, the last tensor 4 bytes inside the one before, 8 bytes after the last)
  bf16 CKPT OUT                 CKPT as a version-5 (BF16) checkpoint: each value rounded to nearest-even BF16,
                                the checksum recomputed (test/ckpt_verify.py)
  greedy CKPT N ID,ID,...       greedy decoding in float64 numpy straight from an llm.c FP32 checkpoint (its tensors read at
                                the offsets of docs/formats.md, no HF directory): the whole sequence run through the
                                forward above for each new token (no KV cache), the argmax of the last position's
                                logits over the V real tokens appended, N times (test/test_prompt.sh). Prints the N ids,
                                then the smallest gap between the best and the second-best logit seen
  ranks CKPT P ID,ID,...        for each id after the first P of the sequence, its rank among the logits the float64
                                forward of the ids before it gives (0: the most likely); prints the largest rank
  bf16check CKPT5 HFDIR         HFDIR holds BF16 tensors whose bits are the checkpoint's, transposed as they should
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_verify  # noqa: E402  (the checksum, recomputed independently)

try:
    import safetensors.numpy as stpkg
except ImportError:
    stpkg = None
NP = {"F32": "<f4", "BF16": "<u2", "F16": "<f2"}


def read_st(path):
    """name -> numpy array (BF16 as uint16 bits), and name -> dtype"""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    h = json.loads(data[8:8 + n])
    h.pop("__metadata__", None)
    arrays, dts = {}, {}
    for k, v in h.items():
        b, e = v["data_offsets"]
        arrays[k] = np.frombuffer(data[8 + n + b:8 + n + e], dtype=NP[v["dtype"]]).reshape(v["shape"])
        dts[k] = v["dtype"]
    if stpkg is not None and "BF16" not in dts.values():  # (numpy has no bfloat16: the package cannot load BF16)
        other = stpkg.load_file(path)
        assert set(other) == set(arrays) and all(np.array_equal(other[k], arrays[k]) for k in arrays), "readers disagree"
    return arrays, dts


def write_st(path, tensors, meta):
    """a safetensors file of tensors (name -> array), keys sorted, header padded to 8 (the reference writer's way)"""
    if stpkg is not None:
        stpkg.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata=meta)
        return
    names = sorted(tensors)
    h, at = {"__metadata__": meta}, 0
    for k in names:
        a = tensors[k]
        h[k] = {"dtype": {"<f4": "F32", "float32": "F32"}[str(a.dtype)], "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
    text = json.dumps(h).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(np.ascontiguousarray(tensors[k]).tobytes() for k in names))


def load_hf(d):
    a, _ = read_st(os.path.join(d, "model.safetensors"))
    a = {(k[len("transformer."):] if k.startswith("transformer.") else k): v.astype(np.float64) for k, v in a.items()}
    return json.load(open(os.path.join(d, "config.json"))), a


def val_batches(val, B, T, steps):
    """the first B*steps samples of the shard (docs/formats.md: 1024-byte header, uint16 tokens)"""
    tok = np.fromfile(val, dtype="<u2", offset=1024).astype(np.int64)
    for s in range(steps):
        x = np.stack([tok[(s * B + b) * T:(s * B + b) * T + T + 1] for b in range(B)])
        yield x[:, :-1], x[:, 1:]


def layernorm(x, w, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * w + b


def gelu(x):  # GPT-2's tanh approximation ("gelu_new")
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward_logits(cfg, p, inp):
    B, T = inp.shape
    C, NH = cfg["n_embd"], cfg["n_head"]
    hs = C // NH
    x = p["wte.weight"][inp] + p["wpe.weight"][:T]
    mask = np.tril(np.ones((T, T), dtype=bool))
    for i in range(cfg["n_layer"]):
        g = lambda n: p["h.%d.%s" % (i, n)]  # noqa: E731
        h = layernorm(x, g("ln_1.weight"), g("ln_1.bias"))
        qkv = h @ g("attn.c_attn.weight") + g("attn.c_attn.bias")  # Conv1D: (in, out)
        q, k, v = (qkv[..., j * C:(j + 1) * C].reshape(B, T, NH, hs).transpose(0, 2, 1, 3) for j in range(3))
        a = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
        a = np.where(mask, a, -np.inf)
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        y = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
        h = layernorm(x, g("ln_2.weight"), g("ln_2.bias"))
        x = x + gelu(h @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias")) @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
    x = layernorm(x, p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["wte.weight"].T  # the tied head


def forward_loss(cfg, p, inp, tgt):
    logits = forward_logits(cfg, p, inp)
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
    return float((lse - np.take_along_axis(logits, tgt[..., None], -1)[..., 0]).mean())


def load_llmc(path):
    """an llm.c FP32 checkpoint (version 3) as (cfg, tensors in HF's names and Conv1D shapes, float64)"""
    data = open(path, "rb").read()
    magic, version, maxT, V, L, NH, C, Vp = struct.unpack("<8i", data[:32])
    if magic != 20240326 or version != 3:
        sys.exit("error: %s: expected an llm.c FP32 checkpoint (magic 20240326, version 3), found magic %d version %d" % (path, magic, version))
    shapes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)), ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)),
              ("attprojw", (L, C, C)), ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
              ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]
    t, at = {}, 1024
    for name, shape in shapes:
        n = int(np.prod(shape))
        t[name] = np.frombuffer(data, "<f4", n, at).reshape(shape).astype(np.float64)
        at += 4 * n
    p = {"wte.weight": t["wte"][:V], "wpe.weight": t["wpe"], "ln_f.weight": t["lnfw"], "ln_f.bias": t["lnfb"]}
    for i in range(L):
        for hf, ours, tr in [("ln_1.weight", "ln1w", 0), ("ln_1.bias", "ln1b", 0), ("attn.c_attn.weight", "qkvw", 1),
                             ("attn.c_attn.bias", "qkvb", 0), ("attn.c_proj.weight", "attprojw", 1), ("attn.c_proj.bias", "attprojb", 0),
                             ("ln_2.weight", "ln2w", 0), ("ln_2.bias", "ln2b", 0), ("mlp.c_fc.weight", "fcw", 1), ("mlp.c_fc.bias", "fcb", 0),
                             ("mlp.c_proj.weight", "fcprojw", 1), ("mlp.c_proj.bias", "fcprojb", 0)]:
            p["h.%d.%s" % (i, hf)] = t[ours][i].T if tr else t[ours][i]
    return {"n_embd": C, "n_head": NH, "n_layer": L}, p


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "forward":
        cfg, p = load_hf(args[0])
        B, T, steps = map(int, args[2:5])
        print("%.9f" % np.mean([forward_loss(cfg, p, x, y) for x, y in val_batches(args[1], B, T, steps)]))
    elif cmd == "torch":
        try:
            import torch
            from transformers import GPT2LMHeadModel
        except ImportError as e:
            print("skip torch comparison: no torch here (%s)" % e)
            return
        m = GPT2LMHeadModel.from_pretrained(args[0], torch_dtype=torch.float32).eval()
        B, T, steps = map(int, args[2:5])
        with torch.no_grad():
            ls = [m(torch.tensor(x), labels=None).logits for x, _ in val_batches(args[1], B, T, steps)]
            loss = [torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), torch.tensor(y).reshape(-1)).item()
                    for lg, (_, y) in zip(ls, val_batches(args[1], B, T, steps))]
        if len(args) > 5:  # and the model as transformers itself writes it
            m.save_pretrained(args[5], safe_serialization=True)
        print("%.9f" % np.mean(loss))
    elif cmd == "qkv":
        data = open(args[0], "rb").read()
        maxT, V, L, NH, C, Vp = struct.unpack("<6i", data[8:32])
        off = 1024 + 4 * (Vp * C + maxT * C + 2 * L * C)  # wte, wpe, ln1w, ln1b: then qkvw (L, 3C, C)
        w = np.frombuffer(data, "<f4", 3 * C * C, off).reshape(3 * C, C).astype(np.float64)
        b = np.frombuffer(data, "<f4", 3 * C, off + 4 * L * 3 * C * C).astype(np.float64)
        _, p = load_hf(args[1])
        x = np.random.default_rng(0).standard_normal((8, C))
        ours, theirs = x @ w.T + b, x @ p["h.0.attn.c_attn.weight"] + p["h.0.attn.c_attn.bias"]
        d = np.abs(ours - theirs).max()
        print("max |W x + b - (x W' + b')| = %.3g over 8 x %d values (of size %.3g)" % (d, 3 * C, np.abs(ours).max()))
        sys.exit(0 if d < 1e-12 else 1)  # the same float32 values, float64 sums of 32 terms in either order: ~1e-16
    elif cmd == "gpt2style":
        a, _ = read_st(os.path.join(args[0], "model.safetensors"))
        a = {k[len("transformer."):]: v for k, v in a.items()}
        cfg = json.load(open(os.path.join(args[0], "config.json")))
        n = cfg["n_positions"]
        for i in range(cfg["n_layer"]):
            a["h.%d.attn.bias" % i] = np.tril(np.ones((n, n), dtype=np.float32)).reshape(1, 1, n, n)
            a["h.%d.attn.masked_bias" % i] = np.array(-1e4, dtype=np.float32)  # a 0-d tensor, as in older files
        a["lm_head.weight"] = a["wte.weight"]
        os.makedirs(args[1], exist_ok=True)
        write_st(os.path.join(args[1], "model.safetensors"), a, {"format": "pt"})
        json.dump(cfg, open(os.path.join(args[1], "config.json"), "w"))
    elif cmd == "bad":
        kind, src, out = args
        os.makedirs(out, exist_ok=True)
        cfgtext = open(os.path.join(src, "config.json")).read()
        open(os.path.join(out, "config.json"), "w").write(cfgtext)
        raw = open(os.path.join(src, "model.safetensors"), "rb").read()
        dst = os.path.join(out, "model.safetensors")
        if kind == "truncated":
            open(dst, "wb").write(raw[:-100])
            return
        if kind == "header":  # the JSON's first '{' made a '['
            open(dst, "wb").write(raw[:8] + b"[" + raw[9:])
            return
        a, _ = read_st(os.path.join(src, "model.safetensors"))
        a = dict(a)
        if kind == "missing":
            del a["transformer.h.1.mlp.c_fc.bias"]
        elif kind == "shape":
            a["transformer.h.0.attn.c_attn.weight"] = np.ascontiguousarray(a["transformer.h.0.attn.c_attn.weight"].T)
        elif kind == "untied":
            a["lm_head.weight"] = a["transformer.wte.weight"] * 2
        elif kind in ("hole", "overlap", "trailing"):
            # the data section is not contiguous: 4 unused bytes before the last tensor (hole), the last tensor
            # starting 4 bytes inside the one before it (overlap), 8 bytes after the last tensor (trailing); every
            # tensor's own byte count stays right, so only the layout check can refuse it
            names = sorted(a)
            h, at, blobs = {"__metadata__": {"format": "pt"}}, 0, []
            for i, k in enumerate(names):
                blob = np.ascontiguousarray(a[k], dtype="<f4").tobytes()
                if i == len(names) - 1 and kind == "hole":
                    blobs.append(b"\0" * 4); at += 4
                if i == len(names) - 1 and kind == "overlap":
                    blobs[-1] = blobs[-1][:-4]; at -= 4
                h[k] = {"dtype": "F32", "shape": list(a[k].shape), "data_offsets": [at, at + len(blob)]}
                blobs.append(blob); at += len(blob)
            if kind == "trailing":
                blobs.append(b"\0" * 8)
            text = json.dumps(h).encode()
            text += b" " * (-len(text) % 8)
            open(dst, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
            return
        write_st(dst, a, {"format": "pt"})
    elif cmd == "bf16":
        data = bytearray(open(args[0], "rb").read())
        f = np.frombuffer(bytes(data), "<u4", offset=1024)
        b16 = ((f + 0x7fff + ((f >> 16) & 1)) >> 16).astype("<u2")  # round to nearest even (no NaN/inf here)
        head = np.frombuffer(bytes(data[:1024]), "<i4").copy()
        head[1] = 5
        head[253:256] = 0
        open(args[1], "wb").write(head.tobytes() + b16.tobytes())
        sys.argv = ["ckpt_verify.py", "--seal", args[1]]
        ckpt_verify.main()
    elif cmd == "greedy":
        cfg, p = load_llmc(args[0])
        seq, new, gap = [int(x) for x in args[2].split(",")], [], np.inf
        for _ in range(int(args[1])):
            last = forward_logits(cfg, p, np.array([seq]))[0, -1]
            top2 = np.sort(last)[-2:]
            gap = min(gap, top2[1] - top2[0])
            new.append(int(np.argmax(last)))
            seq.append(new[-1])
        print(" ".join(map(str, new)))
        print("%.3g" % gap)
    elif cmd == "ranks":
        cfg, p = load_llmc(args[0])
        seq, P = [int(x) for x in args[2].split(",")], int(args[1])
        logits = forward_logits(cfg, p, np.array([seq[:-1]]))[0]  # causal: position i's logits predict seq[i + 1]
        print(max(int((logits[i - 1] > logits[i - 1][seq[i]]).sum()) for i in range(P, len(seq))))
    elif cmd == "bf16check":
        data = open(args[0], "rb").read()
        maxT, V, L, NH, C, Vp = struct.unpack("<6i", data[8:32])
        u = np.frombuffer(data, "<u2", offset=1024)
        a, dts = read_st(os.path.join(args[1], "model.safetensors"))
        # offsets: wte, wpe, ln1w, ln1b, qkvw (3C*C), qkvb (3C), attprojw (C*C), attprojb, ln2w, ln2b: then fcw
        fcw = u[Vp * C + maxT * C + 2 * L * C + 3 * L * C * C + 3 * L * C + L * C * C + 3 * L * C:][:L * 4 * C * C].reshape(L, 4 * C, C)
        good = (set(dts.values()) == {"BF16"} and np.array_equal(a["transformer.h.1.mlp.c_fc.weight"], fcw[1].T)
                and np.array_equal(a["transformer.wte.weight"], u[:V * C].reshape(V, C)))
        cfg = json.load(open(os.path.join(args[1], "config.json")))
        print("dtypes %s, torch_dtype %s, h.1.mlp.c_fc.weight and wte: %s" % (" ".join(sorted(set(dts.values()))),
              cfg.get("torch_dtype"), "the checkpoint's bits" if good else "NOT the checkpoint's bits"))
        sys.exit(0 if good and cfg.get("torch_dtype") == "bfloat16" else 1)


if __name__ == "__main__":
    main()
