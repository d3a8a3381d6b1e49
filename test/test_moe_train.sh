#!/usr/bin/env bash
# test_moe_train.sh: a GPT-2 with experts (--experts, llm/model/moe.h inside llm/model/block.h) through the trainer,
# against one process, on a tiny model (d2, C=32, NH=4, maxT=64, V=257, E=4, K=2, every layer a moe layer) on
# the addition data the other layout tests use. docs/moe.md.
#
#   bash test/test_moe_train.sh          (needs ./train_gpt_cpu and build/train_gpt_emu)
#
# Checked, one line each:
#  1. One process trains: the seed file is a moe model file (version 6, E K M in header[8..10]); the train loss
#     falls over 8 steps; the step line shows "| aux .. z .." and log.jsonl has aux_loss and z_loss, positive.
#  2. Layouts against one process with gradient accumulation over the same micro-batches (the one process sums
#     its micro-batches, a layout splits them over ranks or stages): dp 2 with ZeRO 0, 1, 2, 3; pp 2 with 1f1b
#     and zb-h1; tp 2 (no sequence parallelism: each tp rank runs the whole moe layer, the experts replicated).
#     Train and val losses, grad norms of 4 steps and every final parameter, within the FP32 bounds of
#     test_ddp_zero.sh / test_pp.sh (4e-6 relative losses, 1e-5 absolute parameters), checked by their
#     test/ddp_zero_check.py compare. Every run has capacity drops (--capacity-factor 1): each expert keeps at
#     most ceil(F K N / E) of a micro-batch's assignments, N the micro-batch's tokens, the same in every layout.
#     log.jsonl's routed and dropped counts per moe layer and expert: the routed sum to the step's tokens x K, and
#     at step 1 (the same parameters everywhere) every layout's counts are one process's.
#     The emulated CUDA build (FP32) against the CPU build, one process: 1e-5 (test_emu_vs_cpu.sh's bound).
#  3. Checkpoints: a run resumed from its step-2 state gives the same final model and state bytes as the
#     uninterrupted run; a dp 2 ZeRO-1 state resumed in one process matches the dp 2 run (4e-6, 1e-5).
#  4. Bad flags and refused combinations: one line each naming the flag, exit 1, no output directory.
#  5. The memory report: the table's parameter count (E experts' worth) in the report's num_parameters, and
#     the tagged allocator's parameter + gradient + optimizer bytes against ZeRO's formula (ddp_zero_check memory).
#  6. Expert parallelism (--ep, llm/sharded/expert_parallel.h), against one process within the same FP32 bounds: ep 2
#     over dp 2 with ZeRO 0 and 3 (K = 2, drops) and with K = 1 without drops, ep 4 over dp 4 (ZeRO-2), ep 2 over dp 4
#     (two ep groups, the experts averaged over edp = 2; ZeRO-1), ep 2 with pp 2 (1f1b; and dualpipev with ZeRO-3 and
#     full recompute on a 4-layer model) and with tp 2, the emulated
#     CUDA build's ep 2 (the all-to-alls over its NCCL), DualPipeV's overlapped pairs (llm/parallel/pipeline_pair.h): the
#     dualpipev run's pairs overlapped (the default) vs --overlap-pairs 0: the same final model and state bytes and loss
#     numbers; its --trace: on some rank an all-to-all of one direction (start to wait's end) holds a piece of the other
#     direction's op, never with --overlap-pairs 0 (the same all-to-alls otherwise), each rank's 4 x the pairs the
#     report says it ran in turns; ep 2 x pp 4 dualpipev (-np 8, the pairs whose messages split around them) against
#     one process and its pairs run in turns per rank = DualPipeV's phases' count; the emulated build's dualpipev
#     (started all-to-alls over NCCL) vs the CPU run (1e-5) and its trace likewise; --overlap-pairs without dualpipev refused; the BF16 CPU build's ep 2 (BF16 bounds); the allocator's model-state bytes against ZeRO's formula with
#     the experts sharded over their own group (dp_layout_paper_bytes); samples (decoding through the dispatch) the
#     same text as one process's; checkpoints across layouts: an ep 4 state resumed at ep 2 and in one process, an
#     ep 2 sharded checkpoint in one process. The ledger's all-to-alls of the ep group in the last step, summed over
#     the ranks: 5 calls per moe layer and micro-batch (the counts; the forward's dispatch and combine; the
#     backward's) and exactly L x micro-batches x E x 4 B + 4 x C x 4 B x (the step's kept copies, from log.jsonl)
#     payload bytes: each kept copy to its expert and back, forward and backward; the bytes sent against the uniform
#     routing's (N-1)/N of that, printed (the real routing differs). Bad layouts: --ep not dividing E, nor dp; a
#     dense model.
#  7. A micro-batch's tokens split over ranks (llm/sharded/moe_sequence.h: the logits all-gathered, the whole
#     micro-batch's routing on every rank): cp 2 ring (zigzag: K = 2 with drops, K = 1 without; contiguous: K = 2
#     without), Ulysses (K = 2 and K = 1, with drops), tp 2 with sequence parallelism (K = 2 with drops, K = 1
#     without), ep 2 x cp 2 (-np 4, dp 2; K = 2 with drops), cp 2 x tp 2 + sp (-np 4, the logits gathered over tp
#     then cp: ring zigzag K = 2 with drops, ring contiguous K = 1 with drops, Ulysses K = 1 without),
#     ep 2 x cp 2 x tp 2 + sp (-np 8, dp 2; K = 2 with drops), against one process with the same micro-batches within
#     the FP32 bounds above, and the emulated CUDA build's cp 2, sp and cp 2 x sp (its kernels: 1e-5); the aux and z
#     losses in log.jsonl one process's every step (4e-6 relative), the routed and dropped counts (each rank's own
#     tokens', summed over the ranks) one process's at step 1 and summing to the step's tokens x K; the cp group's
#     all-gathers in the ledger: one per moe layer and micro-batch, N x E FP32 values (N the micro-batch's tokens;
#     under cp x sp the tp level's gathers are test_plan.sh's moecpsp, to the byte).
# Logs: build/moe_train/. Ends with "test_moe_train: N passed, M failed"; exit 1 on any failure.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
CPU=${CPU:-./train_gpt_cpu}
EMU=${EMU:-./build/train_gpt_emu}
CHECK="python3 test/ddp_zero_check.py"
LOG=build/moe_train
rm -rf "$LOG"; mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad, check, badlayout, badflag, train

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
D="$tmp/data"
common=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" --tokenizer "$D/addition_tokenizer.bin"
        -b 4 -t 32 --steps 4 --lr 1e-3 --warmup 1 --lr-final 0.1 --weight-decay 0.1 --grad-clip 0
        --val-every 2 --val-steps 1 --sample-every 0 --checkpoint-every 2 --capacity-factor 1)

# 1. the seed: a fresh moe model saved after a step at learning rate 0
timeout 60 "$CPU" --model d2,C=32,NH=4,maxT=64,V=257 --experts 4 --top-k 2 "${common[@]}" --steps 1 --lr 0 \
    --checkpoint-every 1 --val-every 0 --output-dir "$tmp/seed" > "$LOG/seed.log" 2>&1 || bad "seed checkpoint: see $LOG/seed.log"
SEED="$tmp/seed/model_00000001.bin"
hdr=$(python3 -c "import struct,sys; h=struct.unpack('<11i', open(sys.argv[1],'rb').read(44)); print(h[1], h[8], h[9], h[10])" "$SEED" 2>&1)
if [ "$hdr" = "6 4 2 1" ]; then ok "seed: a moe model file, version 6 with E K M = 4 2 1 in header[8..10]"
else bad "seed header: version E K M = '$hdr', expected '6 4 2 1'"; fi
common+=(--model "$SEED")

train fall 0 "$CPU" --total-batch 128 --steps 8 --lr 3e-3 --checkpoint-every 0 --val-every 0
python3 - "$tmp/fall/log.jsonl" "$LOG/fall.log" > "$tmp/fall.out" <<'EOF'
import json, re, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"train_loss"' in l]
first, last = steps[0], steps[-1]
line = [l for l in open(sys.argv[2], errors="replace") if re.match(r"^step\s+\d", l)]
m = re.search(r"\| aux (\d+\.\d+) z (\d+\.\d+)", line[-1]) if line else None
good = (len(steps) == 8 and last["train_loss"] < first["train_loss"] and m is not None
        and all(s.get("aux_loss", 0) > 0 and s.get("z_loss", 0) > 0 for s in steps))
print("%s one process: train loss %.4f -> %.4f over %d steps; aux %s z %s in log.jsonl (last step), step line '%s'" % (
    "ok  " if good else "FAIL", first["train_loss"], last["train_loss"], len(steps), last.get("aux_loss"),
    last.get("z_loss"), m.group(0) if m else "no aux/z"))
EOF
while IFS= read -r l; do case $l in "ok   "*) ok "${l#ok   }" ;; *) bad "${l#FAIL }" ;; esac; done < "$tmp/fall.out"

# 2. layouts against one process (B*T = 128 tokens a micro-batch)
train one_256 0 "$CPU" --total-batch 256
train one_512 0 "$CPU" --total-batch 512
for z in 0 1 2 3; do
    train dp2_z$z 2 "$CPU" --total-batch 256 --zero $z &&
        check compare "dp 2 ZeRO-$z vs 1 process, 2 micro-batches" "$tmp/dp2_z$z" "$tmp/one_256" 4e-6 1e-5
done
check memory "dp 2 ZeRO-3 memory" "$tmp/dp2_z3.json"
for s in 1f1b zb-h1; do
    train pp2_$s 2 "$CPU" --pp 2 --schedule $s --total-batch 512 &&
        check compare "pp 2 $s vs 1 process, 4 micro-batches" "$tmp/pp2_$s" "$tmp/one_512" 4e-6 1e-5
done
train tp2 2 "$CPU" --tp 2 --total-batch 256 &&
    check compare "tp 2 (experts replicated) vs 1 process, 2 micro-batches" "$tmp/tp2" "$tmp/one_256" 4e-6 1e-5

# the routed and dropped counts in log.jsonl: per moe layer, the routed sum to the step's tokens x K, some dropped
# (capacity factor 1), and step 1 (the same parameters everywhere) the same counts in every layout as in one process
python3 - "$tmp" > "$tmp/counts.out" <<'EOF'
import json, os, sys
tmp = sys.argv[1]
def steps(run):
    return [json.loads(l) for l in open(os.path.join(tmp, run, "log.jsonl")) if '"train_loss"' in l]
for run, ref, tokens in (("dp2_z0", "one_256", 256), ("dp2_z3", "one_256", 256), ("pp2_1f1b", "one_512", 512),
                         ("pp2_zb-h1", "one_512", 512), ("tp2", "one_256", 256)):
    a, b = steps(run), steps(ref)
    sums_ok = all(o["moe_layers"] == [0, 1] and all(sum(r) == tokens * 2 for r in o["moe_routed"]) for o in a)
    dropped = sum(sum(d) for o in a for d in o["moe_dropped"])
    same = a[0]["moe_routed"] == b[0]["moe_routed"] and a[0]["moe_dropped"] == b[0]["moe_dropped"]
    print("%s %s: log.jsonl's per-layer routed counts sum to %d tokens x K = 2 every step: %s; %d dropped over %d steps; step 1's "
          "routed %s and dropped %s = one process's: %s" % ("ok  " if sums_ok and dropped > 0 and same else "FAIL", run, tokens,
          sums_ok, dropped, len(a), a[0]["moe_routed"], a[0]["moe_dropped"], same))
EOF
while IFS= read -r l; do case $l in "ok   "*) ok "${l#ok   }" ;; *) bad "${l#FAIL }" ;; esac; done < "$tmp/counts.out"

# the emulated CUDA build (FP32, its kernels: the router's, the permutes', cuBLASLt's) against the CPU build, one
# process, within test_emu_vs_cpu.sh's bound (1e-5)
if [ -x "$EMU" ]; then
    train emu_256 0 "$EMU" --total-batch 256 &&
        check compare "emulated CUDA (FP32) vs CPU, 1 process, 2 micro-batches" "$tmp/emu_256" "$tmp/one_256" 1e-5 1e-5
else
    bad "the emulated CUDA build: $EMU not built (make build/train_gpt_emu)"
fi

# 3. checkpoints
train res_one 0 "$CPU" --total-batch 256 --resume "$tmp/one_256/state_00000002.bin" &&
    check same "resume: 1 process from its step-2 state vs uninterrupted" "$tmp/res_one" "$tmp/one_256"
train res_dp2to1 0 "$CPU" --total-batch 256 --resume "$tmp/dp2_z1/state_00000002.bin" &&
    check compare "resume: 1 process from a dp 2 ZeRO-1 state vs dp 2" "$tmp/res_dp2to1" "$tmp/dp2_z1" 4e-6 1e-5

# 4. bad flags and refused combinations (the seed model has experts; a descriptor without --experts is dense)
badflag "--experts" --model d2,C=32,NH=4,maxT=64,V=257 --experts -1
badflag "--top-k" --model d2,C=32,NH=4,maxT=64,V=257 --experts 4 --top-k 5
badflag "--top-k" --model d2,C=32,NH=4,maxT=64,V=257 --top-k 2
badflag "--moe-every" --model d2,C=32,NH=4,maxT=64,V=257 --experts 4 --moe-every 0
badflag "--capacity-factor" --capacity-factor -1
badflag "--aux-loss-coef" --aux-loss-coef -0.5
badflag "--overlap-pairs" --overlap-pairs 1

# 6. expert parallelism (ep ranks fold into dp: -np = dp); the references are one_256 (2 micro-batches) and one_512 (4)
train ep2_z0 2 "$CPU" --total-batch 256 --ep 2 --zero 0 &&
    check compare "ep 2 (dp 2) ZeRO-0 vs 1 process, 2 micro-batches" "$tmp/ep2_z0" "$tmp/one_256" 4e-6 1e-5
# (ZeRO-3 with samples: every ep rank decodes the same tokens, each moe layer's token sent to its experts' ranks)
train one_256s 0 "$CPU" --total-batch 256 --sample-every 2 --eval-file "$D/addition_test.bin"
train ep2_z3 2 "$CPU" --total-batch 256 --ep 2 --zero 3 --sample-every 2 --eval-file "$D/addition_test.bin" &&
    check compare "ep 2 (dp 2) ZeRO-3 vs 1 process, 2 micro-batches" "$tmp/ep2_z3" "$tmp/one_256" 4e-6 1e-5 &&
    same_samples "ep 2 ZeRO-3 sampling vs 1 process" ep2_z3 one_256s
check memory "ep 2 ZeRO-3 memory (the experts sharded over edp = 1)" "$tmp/ep2_z3.json"
train ep4 4 "$CPU" --total-batch 512 --ep 4 --zero 2 &&
    check compare "ep 4 (dp 4) ZeRO-2 vs 1 process, 4 micro-batches" "$tmp/ep4" "$tmp/one_512" 4e-6 1e-5
train dp4_ep2 4 "$CPU" --total-batch 512 --ep 2 --zero 1 &&
    check compare "ep 2 over dp 4 (edp 2) ZeRO-1 vs 1 process, 4 micro-batches" "$tmp/dp4_ep2" "$tmp/one_512" 4e-6 1e-5
check memory "ep 2 over dp 4 ZeRO-1 memory" "$tmp/dp4_ep2.json"
train pp2_ep2 4 "$CPU" --total-batch 512 --ep 2 --pp 2 --schedule 1f1b &&
    check compare "ep 2 x pp 2 (1f1b) vs 1 process, 4 micro-batches" "$tmp/pp2_ep2" "$tmp/one_512" 4e-6 1e-5
# K = 1 (Switch) without drops, a fresh model from its descriptor in both runs (the seed file is K = 2)
k1=(--model d2,C=32,NH=4,maxT=64,V=257 --experts 4 --top-k 1 --capacity-factor 0 --total-batch 256)
train one_k1 0 "$CPU" "${k1[@]}"
train ep2_k1 2 "$CPU" "${k1[@]}" --ep 2 &&
    check compare "ep 2, K = 1, no drops vs 1 process, 2 micro-batches" "$tmp/ep2_k1" "$tmp/one_k1" 4e-6 1e-5
# the V schedule with the split backward and ZeRO-3 (each rank two chunks, each chunk its own ep group's all-to-alls),
# and full recompute, on a 4-layer model from its descriptor (DualPipeV: 2 P = 4 micro-batches a step)
d4=(--model d4,C=32,NH=4,maxT=64,V=257 --experts 4 --top-k 2)
train one_d4 0 "$CPU" "${d4[@]}" --total-batch 1024
dpv=("${d4[@]}" --total-batch 1024 --ep 2 --pp 2 --schedule dualpipev --zero 3 --recompute full)
train dualpipev_ep2 4 "$CPU" "${dpv[@]}" --trace "$tmp/dpv_on.trace.json" &&
    check compare "ep 2 x pp 2 dualpipev (pairs overlapped), ZeRO-3, full recompute vs 1 process, 8 micro-batches" \
        "$tmp/dualpipev_ep2" "$tmp/one_d4" 4e-6 1e-5
# DualPipeV's overlapped pairs (llm/parallel/pipeline_pair.h): --overlap-pairs 0 runs each pair's F and B one after the other;
# interleaving them changes no arithmetic, so the final model and state are the same bytes and the losses the same
# numbers. The traces: the overlapped run has, on some rank, an all-to-all of one direction (from its start to its wait's
# end) containing a piece of the other direction's op; the other run has the same all-to-alls, and none contains one.
train dualpipev_ep2_off 4 "$CPU" "${dpv[@]}" --overlap-pairs 0 --trace "$tmp/dpv_off.trace.json" &&
    check same "dualpipev ep 2 x pp 2: pairs overlapped (--overlap-pairs 1) vs one op after the other (0)" \
        "$tmp/dualpipev_ep2_off" "$tmp/dualpipev_ep2"
dpv_emu=()
if [ -x "$EMU" ]; then  # the emulated CUDA build: the started all-to-alls over its NCCL (the comm stream's events)
    train dualpipev_ep2_emu 4 "$EMU" "${dpv[@]}" --trace "$tmp/dpv_emu.trace.json" &&
        check compare "emulated CUDA ep 2 x pp 2 dualpipev (pairs overlapped, all-to-alls over NCCL) vs CPU" \
            "$tmp/dualpipev_ep2_emu" "$tmp/dualpipev_ep2" 1e-5 1e-5 && dpv_emu=("$tmp/dpv_emu.trace.json")
fi
python3 - "$tmp" "${dpv_emu[@]}" > "$tmp/dpv_overlap.out" <<'EOF'
import json, os, sys
tmp = sys.argv[1]
def events(path):
    try:
        return [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError) as e:
        print("FAIL %s: no trace (%s)" % (path, e)); sys.exit(0)
def chunk(name):  # "F3.1" or "F3.1 L3 dispatch": chunk 1
    return name.split()[0].split(".")[1]
def overlap(xs):  # the all-to-alls, those holding a piece of the other direction's op, their ms in flight and exposed
    a2a = [e for e in xs if e["cat"] == "a2a"]
    comp = [e for e in xs if e["cat"] in ("F", "B")]
    holding = [a for a in a2a if any(c["pid"] == a["pid"] and c["cat"] != a["name"][0] and chunk(c["name"]) != chunk(a["name"])
                                     and a["ts"] <= c["ts"] and c["ts"] + c["dur"] <= a["ts"] + a["dur"] for c in comp)]
    return a2a, holding, sum(a["dur"] for a in a2a) / 1e3, sum(a["args"]["exposed"] for a in a2a) / 1e3
def names(r):
    return sorted((a["pid"], a["name"]) for a in r[0])
def losses(run):
    return [l.split('"train_loss":')[1].split(",")[0] for l in open(os.path.join(tmp, run, "log.jsonl")) if '"train_loss"' in l]
on, off = overlap(events(os.path.join(tmp, "dpv_on.trace.json"))), overlap(events(os.path.join(tmp, "dpv_off.trace.json")))
good = len(on[1]) > 0 and len(off[0]) > 0 and len(off[1]) == 0 and names(on) == names(off)
print("%s dualpipev traces: %d all-to-alls (the same per rank, direction, layer, micro-batch in both runs: %s); pairs "
      "overlapped: %d hold a piece of the other direction's op, %.1f of %.1f ms in flight exposed (start + wait); "
      "--overlap-pairs 0: %d hold one, %.1f of %.1f ms exposed" % ("ok  " if good else "FAIL", len(on[0]),
      names(on) == names(off), len(on[1]), on[3], on[2], len(off[1]), off[3], off[2]))
# the report's pairs run by the pair runner (pairs_overlapped, per rank) against the trace: 4 all-to-alls per pair here
# (each chunk one moe layer: the F's dispatch and combine, the B's), in both runs
for run, tr in (("dualpipev_ep2", on), ("dualpipev_ep2_off", off)):
    ranks = json.load(open(os.path.join(tmp, run + ".json")))["ranks"]
    per = [sum(1 for a in tr[0] if a["pid"] == r["rank"]) for r in ranks]
    pairs = [r.get("pairs_overlapped", -1) for r in ranks]
    print("%s %s: the report's pairs run in turns per rank %s (--overlap-pairs %s), the trace's all-to-alls per rank %s = 4 x them" % (
        "ok  " if per == [4 * p for p in pairs] and min(pairs) > 0 else "FAIL", run, pairs, ranks[0].get("overlap_pairs"), per))
a, b = losses("dualpipev_ep2"), losses("dualpipev_ep2_off")
print("%s dualpipev losses, pairs overlapped vs not: %d steps, the same numbers: %s" % (
    "ok  " if a == b and len(a) == 4 else "FAIL", len(a), a == b))
for path in sys.argv[2:]:  # the emulated build: the same interleave (its streams are synchronous)
    emu = overlap(events(path))
    print("%s emulated CUDA dualpipev trace: %d all-to-alls, %d hold a piece of the other direction's op" % (
        "ok  " if len(emu[1]) > 0 and names(emu) == names(on) else "FAIL", len(emu[0]), len(emu[1])))
EOF
while IFS= read -r l; do case $l in "ok   "*) ok "${l#ok   }" ;; *) bad "${l#FAIL }" ;; esac; done < "$tmp/dpv_overlap.out"
# pp 4 x ep 2 (-np 8, an 8-layer model, 8 micro-batches a dp rank): here 6 of the 25 pairs have their F's output due
# to the next rank before the list's B; their messages are split around the pair, and every pair runs in turns: each
# pp rank's pairs_overlapped in the report = its pairs in DualPipeV's phases 4 and 5, 2 (m - 2P + r + 1) + (P - r - 1),
# less rank P - 1's first F0 (not paired)
d8=(--model d8,C=32,NH=4,maxT=64,V=257 --experts 4 --top-k 2 --total-batch 2048)
train one_d8 0 "$CPU" "${d8[@]}"
train dualpipev_pp4_ep2 8 "$CPU" "${d8[@]}" --ep 2 --pp 4 --schedule dualpipev &&
    check compare "ep 2 x pp 4 dualpipev (-np 8, pairs overlapped) vs 1 process, 16 micro-batches" "$tmp/dualpipev_pp4_ep2" "$tmp/one_d8" 4e-6 1e-5 &&
    python3 - "$tmp/dualpipev_pp4_ep2.json" > "$tmp/dpv_pp4.out" <<'EOF'
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
P, m = 4, 8
got = [(r["pp_rank"], r.get("pairs_overlapped")) for r in ranks]
want = [(r["pp_rank"], 2 * (m - 2 * P + r["pp_rank"] + 1) + (P - r["pp_rank"] - 1) - (r["pp_rank"] == P - 1)) for r in ranks]
print("%s ep 2 x pp 4 dualpipev: pairs run in turns per rank (pp rank, pairs) %s, DualPipeV's phases give %s" % (
    "ok  " if got == want else "FAIL", got, want))
EOF
[ -s "$tmp/dpv_pp4.out" ] && while IFS= read -r l; do case $l in "ok   "*) ok "${l#ok   }" ;; *) bad "${l#FAIL }" ;; esac; done < "$tmp/dpv_pp4.out"
train tp2_ep2 4 "$CPU" --total-batch 256 --ep 2 --tp 2 &&
    check compare "ep 2 x tp 2 vs 1 process, 2 micro-batches" "$tmp/tp2_ep2" "$tmp/one_256" 4e-6 1e-5
if [ -x "$EMU" ]; then
    train emu_ep2 2 "$EMU" --total-batch 256 --ep 2 &&
        check compare "emulated CUDA ep 2 (all_to_all_v over NCCL) vs CPU, 1 process" "$tmp/emu_ep2" "$tmp/one_256" 1e-5 1e-5
fi
# BF16 (the CPU build's 16-bit storage, FP32 master weights): the all-to-alls move 16-bit rows, the experts' gradients
# are reduced in BF16; against one BF16 process within test_ddp_zero.sh's BF16 bounds (ddp_zero_check.py update)
CPU16=${CPU16:-./build/train_gpt_cpu_bf16}
if [ -x "$CPU16" ]; then
    train bf16_one 0 "$CPU16" --total-batch 256 && train bf16_ep2 2 "$CPU16" --total-batch 256 --ep 2 &&
        check update "BF16 ep 2 vs 1 BF16 process" "$tmp/bf16_ep2" "$tmp/bf16_one" "$SEED" 2e-3 0.08
else
    bad "the BF16 CPU build: $CPU16 not built (make build/train_gpt_cpu_bf16)"
fi
train res_ep4to2 2 "$CPU" --total-batch 512 --ep 2 --resume "$tmp/ep4/state_00000002.bin" &&
    check compare "resume: ep 2 from an ep 4 state vs ep 4" "$tmp/res_ep4to2" "$tmp/ep4" 4e-6 1e-5
train res_ep4to1 0 "$CPU" --total-batch 512 --resume "$tmp/ep4/state_00000002.bin" &&
    check compare "resume: 1 process from an ep 4 state vs ep 4" "$tmp/res_ep4to1" "$tmp/ep4" 4e-6 1e-5
train ep2_sharded 2 "$CPU" --total-batch 256 --ep 2 --checkpoint-format both &&
    train res_ep2sh 0 "$CPU" --total-batch 256 --resume "$tmp/ep2_sharded/ckpt_00000002" &&
    check compare "resume: 1 process from an ep 2 sharded checkpoint vs ep 2" "$tmp/res_ep2sh" "$tmp/ep2_sharded" 4e-6 1e-5
python3 - "$tmp" > "$tmp/ep_ledger.out" <<'EOF'
import json, os, sys
tmp, C, E, x = sys.argv[1], 32, 4, 4  # FP32: 4 bytes a value
for run in ("ep2_z0", "ep4", "dp4_ep2"):
    r = json.load(open(os.path.join(tmp, run + ".json")))
    last = [json.loads(l) for l in open(os.path.join(tmp, run, "log.jsonl")) if '"train_loss"' in l][-1]
    kept = sum(sum(a) - sum(d) for a, d in zip(last["moe_routed"], last["moe_dropped"]))  # all ranks' kept copies
    rows = [row for rk in r["ranks"] for row in rk["ledger_step"]["rows"] if row["kind"] == "all_to_all" and row["group"] == "ep"]
    calls, payload, sent = sum(w["calls"] for w in rows), sum(w["payload_bytes"] for w in rows), sum(w["sent_bytes"] for w in rows)
    N, L, micro = rows[0]["size"], len(last["moe_layers"]), len(r["ranks"]) * r["grad_accum"]  # (rank, micro-batch) pairs
    want_calls, want_payload = 5 * L * micro, L * micro * E * 4 + 4 * kept * C * x
    uniform = (N - 1) / N * want_payload
    good = calls == want_calls and payload == want_payload and 0 < sent < payload
    print("%s %s: the ep group's all-to-alls of the last step over all ranks: %d calls (want 5 x %d moe layers x %d micro-batches), "
          "%d payload bytes (want %d: the counts and %d kept copies x C x 4 B, to the expert and back, forward and backward); "
          "sent %d B, %.3f x the uniform routing's (N-1)/N = %d B" % ("ok  " if good else "FAIL", run, calls, L, micro, payload,
          want_payload, kept, sent, sent / uniform, uniform))
EOF
while IFS= read -r l; do case $l in "ok   "*) ok "${l#ok   }" ;; *) bad "${l#FAIL }" ;; esac; done < "$tmp/ep_ledger.out"
badlayout ep_not_dividing_e 3 "--ep 3" --ep 3
badlayout ep_not_dividing_dp 2 "--ep 4" --ep 4
badlayout ep_dense_model 2 "--ep 2: expected a model with experts" --model d2,C=32,NH=4,maxT=64,V=257 --ep 2

# 5. the parameter count: the table's (E experts' worth) in the report
python3 - "$tmp/one_256.json" > "$tmp/count.out" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
C, Vp, maxT, L, E = 32, 384, 64, 2, 4
layer = 4 * C * C + 8 * C + E * C + E * (8 * C * C + 5 * C)  # attention half + ln2, router, E experts' MLPs
psi = Vp * C + maxT * C + L * layer + 2 * C
n = r["num_parameters"]
print("%s parameters: report %d, the table's %d (E = %d experts a layer)" % ("ok  " if n == psi else "FAIL", n, psi, E))
EOF
while IFS= read -r l; do case $l in "ok   "*) ok "${l#ok   }" ;; *) bad "${l#FAIL }" ;; esac; done < "$tmp/count.out"

# 7. the tokens of a micro-batch split over ranks: context parallelism (--cp 2, ring and Ulysses, zigzag and contiguous
#    chunks), sequence parallelism (--tp 2 --sequence-parallel 1) and both (-np 4), whose routing is the whole
#    micro-batch's on every rank (the logits all-gathered: llm/sharded/moe_sequence.h), so the capacity, the drops and
#    both losses are one process's; K = 1 and 2, with drops (capacity factor 1) and without, aux and z losses on (their default
#    coefficients), against one process with the same micro-batches, within the FP32 bounds above
k1d=(--model d2,C=32,NH=4,maxT=64,V=257 --experts 4 --top-k 1 --capacity-factor 1 --total-batch 256)
train one_k1d 0 "$CPU" "${k1d[@]}"
train one_k2n 0 "$CPU" --total-batch 256 --capacity-factor 0
seqruns=(
  "cp2_ring one_256 2 cp 2 ring, K = 2, drops|--total-batch 256 --cp 2"
  "cp2_uly one_256 2 cp 2 Ulysses, K = 2, drops|--total-batch 256 --cp 2 --cp-impl ulysses"
  "sp2 one_256 2 tp 2 + sp, K = 2, drops|--total-batch 256 --tp 2 --sequence-parallel 1"
  "cp2_ring_k1 one_k1 2 cp 2 ring, K = 1, no drops|${k1[*]} --cp 2"
  "cp2_uly_k1d one_k1d 2 cp 2 Ulysses, K = 1, drops|${k1d[*]} --cp 2 --cp-impl ulysses"
  "sp2_k1 one_k1 2 tp 2 + sp, K = 1, no drops|${k1[*]} --tp 2 --sequence-parallel 1"
  "cp2_cont_k2n one_k2n 2 cp 2 ring contiguous, K = 2, no drops|--total-batch 256 --capacity-factor 0 --cp 2 --cp-balance contiguous"
  "ep2_cp2 one_256 4 ep 2 x cp 2 (dp 2), K = 2, drops|--total-batch 256 --cp 2 --ep 2"
  "cpsp_ring one_256 4 cp 2 ring x tp 2 + sp, K = 2, drops|--total-batch 256 --cp 2 --tp 2 --sequence-parallel 1"
  "cpsp_uly_k1 one_k1 4 cp 2 Ulysses x tp 2 + sp, K = 1, no drops|${k1[*]} --cp 2 --cp-impl ulysses --tp 2 --sequence-parallel 1"
  "cpsp_cont_k1d one_k1d 4 cp 2 ring contiguous x tp 2 + sp, K = 1, drops|${k1d[*]} --cp 2 --cp-balance contiguous --tp 2 --sequence-parallel 1"
  "ep2_cpsp one_256 8 ep 2 x cp 2 x tp 2 + sp (dp 2), K = 2, drops|--total-batch 256 --cp 2 --tp 2 --sequence-parallel 1 --ep 2"
)
seqdone=()
for r in "${seqruns[@]}"; do
    read -r name ref np what <<< "${r%%|*}"
    read -r -a args <<< "${r#*|}"
    train "$name" "$np" "$CPU" "${args[@]}" &&
        check compare "$what vs 1 process, 2 micro-batches" "$tmp/$name" "$tmp/$ref" 4e-6 1e-5 && seqdone+=("$name:$ref")
done
if [ -x "$EMU" ]; then  # the kernels' side (the scatter of the gathered logits, the local routing's two kernels)
    train emu_cp2 2 "$EMU" --total-batch 256 --cp 2 &&
        check compare "emulated CUDA cp 2 ring vs CPU, 1 process" "$tmp/emu_cp2" "$tmp/one_256" 1e-5 1e-5 && seqdone+=("emu_cp2:one_256")
    train emu_sp2 2 "$EMU" --total-batch 256 --tp 2 --sequence-parallel 1 &&
        check compare "emulated CUDA tp 2 + sp vs CPU, 1 process" "$tmp/emu_sp2" "$tmp/one_256" 1e-5 1e-5 && seqdone+=("emu_sp2:one_256")
    train emu_cpsp 4 "$EMU" --total-batch 256 --cp 2 --tp 2 --sequence-parallel 1 &&
        check compare "emulated CUDA cp 2 x tp 2 + sp vs CPU, 1 process" "$tmp/emu_cpsp" "$tmp/one_256" 1e-5 1e-5 &&
        seqdone+=("emu_cpsp:one_256")
fi
# the printed aux and z losses one process's (4e-6 relative, every step); log.jsonl's routed and dropped counts (local
# ones summed over the ranks) every step summing to the step's tokens x K, and at step 1 one process's; the cp group's
# all-gathers in the ledger: one per moe layer and micro-batch, N x E FP32 values each (N = 128 tokens a micro-batch)
python3 - "$tmp" "${seqdone[@]}" > "$tmp/seq.out" <<'PY'
import json, os, sys
tmp = sys.argv[1]
def steps(run):
    return [json.loads(l) for l in open(os.path.join(tmp, run, "log.jsonl")) if '"train_loss"' in l]
for pair in sys.argv[2:]:
    run, ref = pair.split(":")
    a, b = steps(run), steps(ref)
    K = sum(b[0]["moe_routed"][0]) // 256  # (one process's: every token routed to K experts)
    rel = max(abs(x[k] - y[k]) / abs(y[k]) for x, y in zip(a, b) for k in ("aux_loss", "z_loss"))
    sums = all(sum(r) == 256 * K for o in a for r in o["moe_routed"])
    same = a[0]["moe_routed"] == b[0]["moe_routed"] and a[0]["moe_dropped"] == b[0]["moe_dropped"]
    drops = sum(sum(d) for o in b for d in o["moe_dropped"])
    good = len(a) == len(b) == 4 and rel <= 4e-6 and sums and same
    msg = "%s %s: aux and z losses of %d steps max rel diff %.1e vs %s (tol 4e-6); routed counts sum to 256 x K = %d: %s; " \
          "step 1's routed %s and dropped %s = one process's: %s (%d dropped over the run)" % (
          "ok  " if good else "FAIL", run, len(a), rel, ref, 256 * K, sums, a[0]["moe_routed"], a[0]["moe_dropped"], same, drops)
    r = json.load(open(os.path.join(tmp, run + ".json")))
    if r.get("cp", 1) > 1:
        E, L, micro, N = 4, len(a[0]["moe_layers"]), r["grad_accum"], 128
        rows = [w for w in r["ranks"][0]["ledger_step"]["rows"] if w["kind"] == "all_gather" and w["group"] == "cp"]
        calls, payload = sum(w["calls"] for w in rows), sum(w["payload_bytes"] for w in rows)
        lgood = calls == L * micro and payload == L * micro * N * E * 4
        print("%s %s: the cp group's all-gathers of the last step (rank 0): %d calls (want %d moe layers x %d micro-batches), "
              "%d payload bytes (want %d x %d x %d tokens x E = %d x 4 B)" % ("ok  " if lgood else "FAIL", run, calls, L, micro,
              payload, L, micro, N, E))
    print(msg)
PY
while IFS= read -r l; do case $l in "ok   "*) ok "${l#ok   }" ;; *) bad "${l#FAIL }" ;; esac; done < "$tmp/seq.out"
[ "${#seqdone[@]}" -gt 0 ] || bad "no sequence-split run to check"

echo "test_moe_train: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
