#!/usr/bin/env bash
# test_hf.sh: Hugging Face in and out (scripts/export_hf.py, scripts/import_hf.py; docs/huggingface.md). A tiny model
# (d2, C=32, V=257) trained 30 steps on the addition data, its model_00000030.bin exported and imported again:
#  - the export's layout: config.json's GPT2LMHeadModel fields (bos/eos: the end-of-text id of the tokenizer file's
#    own header, as ints), the tensors GPT2LMHeadModel saves with their HF shapes
#    (Conv1D (in, out), wte of V rows, no lm_head, no mask buffers);
#  - checkpoint -> HF -> checkpoint and HF -> checkpoint -> HF give the same bytes (cmp);
#  - transposition against independent computations (test/hf_check.py, which reads the files without scripts/):
#    the first layer's q, k, v of random inputs from qkvw read at its offset in the checkpoint (docs/formats.md)
#    against HF's c_attn; and a float64 numpy GPT-2 forward from the HF directory gives the trainer's val loss of
#    the same tokens within 2e-5 (fp32 vs float64 over a 2-layer C=32 model: the trainer's rounding and the log's
#    8 digits are ~1e-7 here; one square matrix transposed moves the loss ~2e-2);
#  - where transformers and torch import, GPT2LMHeadModel's FP32 loss of the same tokens = the trainer's within 1e-5
#    (both FP32, different summation orders: the issue measured 8e-7), and the directory its save_pretrained writes
#    imports to the checkpoint's bytes; else "skip ...: no torch here";
#  - GPT-2's released layout (names without "transformer.", h.N.attn.bias buffers, lm_head.weight = wte, sorted
#    keys, written by the safetensors package where it imports) imports to the same checkpoint;
#  - BF16: a version-5 checkpoint exports BF16 tensors holding its bits (config torch_dtype bfloat16) and imports back
#    to the same bytes;
#  - the trainer starts from the imported checkpoint (--model): its step-0 val loss is the exported run's last one,
#    its training losses finite and far below a fresh model's ln(257) = 5.55;
#  - bad inputs (truncated file, broken JSON header, a missing tensor, a wrong shape, an untied lm_head, a data
#    section with a hole, an overlap or bytes after its last tensor, a config
#    the trainer cannot compute, a damaged checkpoint, non-zero vocabulary padding): one line "error: ..." naming
#    the file, a non-zero exit, nothing written.
set -uo pipefail
BIN=${BIN:-./train_gpt_cpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # pass, fail, ok, bad
skips=0
H="python3 test/hf_check.py"

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
val=$tmp/data/addition_val.bin
common=(--train-data "$tmp/data/addition_train.bin" --val-data "$val" --tokenizer "$tmp/data/addition_tokenizer.bin"
        -b 4 -t 32 --lr 3e-3 --val-steps 2 --sample-every 0)
"$BIN" "${common[@]}" --model d2,C=32,NH=4,maxT=64,V=257 --steps 30 --val-every 30 --checkpoint-every 30 \
    --output-dir "$tmp/run" > "$tmp/run.out" 2>&1 || { bad "training run: exit $?"; tail -3 "$tmp/run.out"; }
ck=$tmp/run/model_00000030.bin
vloss=$(python3 -c 'import json,sys; print([o for o in map(json.loads, open(sys.argv[1])) if o.get("step") == 30 and "val_loss" in o][0]["val_loss"])' "$tmp/run/log.jsonl")

# export, and what it wrote
if python3 scripts/export_hf.py "$ck" "$tmp/hf1" > "$tmp/e1.out" 2>&1; then ok "export: $(cat "$tmp/e1.out")"; else bad "export: $(cat "$tmp/e1.out")"; fi
if out=$(python3 - "$tmp/hf1" "$tmp/data/addition_tokenizer.bin" <<'PY' 2>&1
import json, os, struct, sys
sys.path.insert(0, "test")
from hf_check import read_st
d = sys.argv[1]
c = json.load(open(os.path.join(d, "config.json")))
# the end-of-text id from the tokenizer's own header (llm.c's tokenizer format, version 2: magic, version, V, eot)
magic, version, tv, eot = struct.unpack("<4i", open(sys.argv[2], "rb").read(16))
assert magic == 20240328 and version == 2, "tokenizer header"
want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257, "n_positions": 64, "n_embd": 32,
        "n_layer": 2, "n_head": 4, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
        "bos_token_id": eot, "eos_token_id": eot}
# == alone would let 256.0 or True through; transformers' GPT2Config takes these ids as ints
bad = ["%s=%r" % (k, c.get(k)) for k in want if c.get(k) != want[k] or type(c.get(k)) is not type(want[k])]
a, dts = read_st(os.path.join(d, "model.safetensors"))
C, L = 32, 2
shapes = {"wte.weight": (257, C), "wpe.weight": (64, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
for i in range(L):  # GPT2LMHeadModel's names; Conv1D weights (in, out)
    for n, s in [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)), ("attn.c_attn.bias", (3 * C,)),
                 ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)), ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
                 ("mlp.c_fc.weight", (C, 4 * C)), ("mlp.c_fc.bias", (4 * C,)), ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))]:
        shapes["h.%d.%s" % (i, n)] = s
got = {k: tuple(v.shape) for k, v in a.items()}
want_t = {"transformer." + k: v for k, v in shapes.items()}
bad += ["%s %s" % (k, got.get(k)) for k in sorted(set(got) | set(want_t)) if got.get(k) != want_t.get(k)]
bad += ["dtype %s" % x for x in set(dts.values()) if x != "F32"]
print("config.json (bos/eos = the tokenizer's end-of-text %d) and the %d tensors' names, shapes, F32: %s"
      % (eot, len(got), "as GPT2LMHeadModel's" if not bad else "; ".join(bad)))
sys.exit(1 if bad else 0)
PY
); then ok "$out"; else bad "$out"; fi

# the round trips
python3 scripts/import_hf.py "$tmp/hf1" "$tmp/back.bin" > "$tmp/i1.out" 2>&1
cmp -s "$ck" "$tmp/back.bin" && ok "checkpoint -> HF -> checkpoint: the same bytes" || bad "checkpoint -> HF -> checkpoint differs: $(cat "$tmp/i1.out")"
python3 scripts/export_hf.py "$tmp/back.bin" "$tmp/hf2" > /dev/null 2>&1
cmp -s "$tmp/hf1/model.safetensors" "$tmp/hf2/model.safetensors" && cmp -s "$tmp/hf1/config.json" "$tmp/hf2/config.json" &&
    ok "HF -> checkpoint -> HF: the same config.json and model.safetensors" || bad "HF -> checkpoint -> HF differs"

# transposition and the whole model against independent computations
out=$($H qkv "$ck" "$tmp/hf1" 2>&1) && ok "first layer's q, k, v: checkpoint's W x + b = HF's x W' + b': $out" || bad "first layer's q, k, v: $out"
ref=$($H forward "$tmp/hf1" "$val" 4 32 2 2>&1)
if python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) < 2e-5 else 1)' "$ref" "$vloss" 2>/dev/null; then
    ok "numpy float64 forward of the HF directory: loss $ref = the trainer's val loss $vloss (within 2e-5)"
else bad "numpy forward of the HF directory: loss $ref, the trainer's val loss $vloss"; fi
tl=$($H torch "$tmp/hf1" "$val" 4 32 2 "$tmp/hf_saved" 2> "$tmp/torch.err" | tail -1)  # (stderr: transformers' progress bars)
[ -n "$tl" ] || tl="(none: $(tail -1 "$tmp/torch.err"))"
if [[ "$tl" == skip* ]]; then echo "$tl"; skips=$((skips+1))
else
    if python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) < 1e-5 else 1)' "$tl" "$vloss" 2>/dev/null; then
        ok "transformers' GPT2LMHeadModel (FP32): loss $tl = the trainer's val loss $vloss (within 1e-5)"
    else bad "transformers' GPT2LMHeadModel: loss $tl, the trainer's val loss $vloss"; fi
    python3 scripts/import_hf.py "$tmp/hf_saved" "$tmp/saved.bin" > "$tmp/s.out" 2>&1
    cmp -s "$ck" "$tmp/saved.bin" && ok "GPT2LMHeadModel.save_pretrained's directory imports to the same bytes" ||
        bad "GPT2LMHeadModel.save_pretrained's directory: $(cat "$tmp/s.out")"
fi

# GPT-2's released layout
$H gpt2style "$tmp/hf1" "$tmp/gpt2style" > /dev/null 2>&1
python3 scripts/import_hf.py "$tmp/gpt2style" "$tmp/g.bin" > "$tmp/g.out" 2>&1
cmp -s "$ck" "$tmp/g.bin" && ok "GPT-2's released layout (no prefix, mask buffers, lm_head = wte, sorted keys) imports to the same bytes" ||
    bad "GPT-2's released layout: $(cat "$tmp/g.out")"

# BF16
$H bf16 "$ck" "$tmp/bf16.bin" > /dev/null 2>&1
python3 scripts/export_hf.py "$tmp/bf16.bin" "$tmp/hfb" > "$tmp/b.out" 2>&1
out=$($H bf16check "$tmp/bf16.bin" "$tmp/hfb" 2>&1) && ok "BF16 checkpoint exported: $out" || bad "BF16 export: $out $(cat "$tmp/b.out")"
python3 scripts/import_hf.py "$tmp/hfb" "$tmp/bf16back.bin" > "$tmp/b2.out" 2>&1
cmp -s "$tmp/bf16.bin" "$tmp/bf16back.bin" && ok "BF16 checkpoint -> HF -> checkpoint: the same bytes (version 5)" || bad "BF16 round trip differs: $(cat "$tmp/b2.out")"

# the trainer continues from the imported checkpoint
"$BIN" "${common[@]}" --model "$tmp/back.bin" --steps 4 --val-every 4 --output-dir "$tmp/cont" > "$tmp/cont.out" 2>&1
if out=$(python3 - "$tmp/cont/log.jsonl" "$vloss" <<'PY' 2>&1
import json, math, sys
try:
    log = [json.loads(l) for l in open(sys.argv[1])]
except OSError as e:
    sys.exit("no log: %s" % e)
v0 = [o["val_loss"] for o in log if o["step"] == 0 and "val_loss" in o]
tr = [o["train_loss"] for o in log if "train_loss" in o]
good = v0 == [float(sys.argv[2])] and len(tr) == 4 and all(math.isfinite(x) and x < 4.0 for x in tr)
print("step-0 val loss %s (the export's %s), train losses %s (a fresh model: ~5.55)" % (v0, sys.argv[2], " ".join("%.4f" % x for x in tr)))
sys.exit(0 if good else 1)
PY
); then ok "trainer --model imported.bin: $out"; else bad "trainer --model imported.bin: $out $(grep -m1 error "$tmp/cont.out")"; fi

# bad inputs: one line naming the file, exit != 0, nothing written
refused() {  # WHAT FILE-IN-MESSAGE OUTPUT CMD...
    local what=$1 name=$2 dst=$3; shift 3
    local msg rc lines left
    msg=$("$@" 2>&1); rc=$?
    lines=$(printf '%s\n' "$msg" | grep -c .)
    left=$(ls -d "$dst" "$dst".tmp "$dst"/* 2>/dev/null | grep -cE 'model.safetensors|config.json|\.bin|\.tmp')
    if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && [[ "$msg" == "error: "*"$name"* ]] && [ "$left" -eq 0 ]; then
        ok "refused $what: exit $rc, one line, nothing written: $msg"
    else bad "$what: exit $rc, $lines lines, $left files written: $msg"; fi
}
for kind in truncated header missing shape untied hole overlap trailing; do
    $H bad $kind "$tmp/hf1" "$tmp/bad_$kind" > /dev/null 2>&1
    refused "$kind model.safetensors" "bad_$kind/model.safetensors" "$tmp/out_$kind.bin" python3 scripts/import_hf.py "$tmp/bad_$kind" "$tmp/out_$kind.bin"
done
mkdir -p "$tmp/bad_relu" && cp "$tmp/hf1/model.safetensors" "$tmp/bad_relu/" &&
    sed 's/"gelu_new"/"relu"/' "$tmp/hf1/config.json" > "$tmp/bad_relu/config.json"
refused "config.json with activation relu" "bad_relu/config.json" "$tmp/out_relu.bin" python3 scripts/import_hf.py "$tmp/bad_relu" "$tmp/out_relu.bin"
cp "$ck" "$tmp/damaged.bin" && printf '\x55' | dd of="$tmp/damaged.bin" bs=1 seek=5000 conv=notrunc 2>/dev/null
refused "a damaged checkpoint (one byte changed)" "damaged.bin" "$tmp/hf_damaged" python3 scripts/export_hf.py "$tmp/damaged.bin" "$tmp/hf_damaged"
cp "$ck" "$tmp/padded.bin" && printf '\x3f' | dd of="$tmp/padded.bin" bs=1 seek=$((1024 + 4 * 300 * 32 + 3)) conv=notrunc 2>/dev/null &&
    python3 test/ckpt_verify.py --seal "$tmp/padded.bin"
refused "a checkpoint whose vocabulary padding is not zero" "padded.bin" "$tmp/hf_padded" python3 scripts/export_hf.py "$tmp/padded.bin" "$tmp/hf_padded"

echo "test_hf: $pass passed, $fail failed, $skips skipped"
[ "$fail" -eq 0 ]
