#!/usr/bin/env bash
# test_pp.sh: pipeline parallelism (llm/parallel/pipeline.h, the schedules of llm/parallel/schedule.h) under mpirun,
# against one process, the simulator and the formulas.
#
#   bash test/test_pp.sh   (needs ./train_gpt_cpu, build/train_gpt_emu{,_bf16}, build/train_gpt_cpu_bf16)
#
# Checked, one line each (a 4-layer model, so pp 4 and interleaved pp 2 x V 2 have a layer per stage):
#  1. Equivalence with one process on the same global batch, from the same seed checkpoint and data:
#     the train and val losses and grad norms of 4 steps and every parameter of the final model.
#     pp 2 and pp 4 (1f1b), gpipe, interleaved pp 2 x V 2, zb-h1 at pp 2 and pp 4; m = 1, m < P (pp 4,
#     m = 2) and m not a multiple of P (pp 4, m = 3; gpipe pp 2, m = 3); dp 2 x pp 2 with ZeRO-1 and
#     with ZeRO-3 (interleaved); tp 2 x pp 2; dp 2 x tp 2 x pp 2 with ZeRO-1 and sequence parallelism
#     (8 processes), and the same with ZeRO-3 and zb-h1; with clipping (the global norm counts the tied embedding once: counted twice,
#     the norm and so the clipped update change). --recompute selective and full give the same bytes as
#     without (1f1b and zb-h1); every schedule and depth gives the same bytes as pp 2 1f1b (the same
#     sums in the same order), and ZeRO-3 interleaved / zb-h1 the same as ZeRO-1 1f1b. The samples and the exact-match answers are the same text as one
#     process's. The tied embedding's two copies (first and last stage) are identical at the end.
#  2. Memory: each rank's model states (the tagged allocator) against the ZeRO paper's Table 1 with
#     Psi = the parameters its stage holds.
#  3. Activation memory against the simulator: on every rank the micro-batch slots the executor
#     allocated equal the simulator's peak of live micro-batches (gpipe m, 1f1b min(P - r, m)), and
#     the activation bytes the allocator counted scale with them exactly (gpipe / 1f1b per rank).
#  4. The bubble of real runs at pp 2 (wall clock, 2 cores; --trace): 1f1b with m = 2 and 8, zb-h1 with
#     m = 8: the trace holds every op of the schedule once per rank; each measured bubble is within
#     0.15 of the simulator's with the measured op times, 1f1b's m = 2 larger than m = 8; printed
#     beside (P-1)/(m+P-1). The zb-h1 trace drawn by scripts/plot_trace.py.
#  5. Resume across layouts: pp 2 -> 1, 1 -> pp 4, dp 2 x tp 2 x pp 2 -> dp 8, each against the
#     uninterrupted run.
#  6. The emulated CUDA build (FP32: comm.h's NCCL path with its batched P2P) at pp 2, zb-h1 pp 2 and
#     tp 2 x pp 2 against the CPU build's one process; BF16 emulated pp 2 against its one process; the same for the CPU build in BF16.
#  7. Bad layouts, each refused before anything is written with one line: more stages than layers,
#     interleaved with m not a multiple of P, --vpp without interleaved, --vpp with --pp 1, an unknown
#     schedule.
#  9. The V schedules (zbv, dualpipev: llm/parallel/schedule_v.h) against one process: each at pp 2 and pp 4 (an
#     8-layer model: 8 virtual stages), dualpipev dp 2 x pp 2 with ZeRO-1, zbv tp 2 x pp 2, zbv dp 2 x pp 2 with ZeRO-3
#     (rank 0's two stages each acquire the tied embedding: llm/parallel/zero.h lists it twice); the tied embedding's one
#     copy on pp rank 0; the placement and the simulator's peak in the reports (zbv 2P chunk-micro-batches,
#     dualpipev 2P + 1; the executor's slots, per chunk, within 2 of it); m < 2P and --vpp 3 refused with one line. (About 20 s.)
#  8. The reports of the runs of 1 and 9 (no new runs): each rank's point-to-point rows of the comm ledger
#     (llm/comm/comm_ledger.h: sends and receives on the pp group, calls, payload and sent bytes) against the
#     messages the schedule's chain implies (m activations forward and m gradients back per neighbour of
#     each virtual stage, (R, C) values each: R = B T, or B T / t with sequence parallelism), and the
#     loss's 4-byte broadcast; the tagged allocator's peaks (llm/core/context.h, *_peak_bytes): every peak >=
#     what is live at the end, the kinds allocated once (parameters, gradients, moments, activations)
#     peak = live, the activation peak = the pipeline's slots and, per rank, GPipe's / 1F1B's = m /
#     min(P - r, m); the communication buffers' peak >= live + the checkpoint's (Psi + U)-float gather
#     to the first stage, = without dp and tp (ddp_zero_check.py p2p, peaks, peaks_pp say why).
#
# Tolerances: those of test/test_tp.sh and test/test_ddp_zero.sh, for the same reason: only the order
# of sums differs (here the tied embedding's gradient: the LM head's and the encoder's parts summed
# per stage, then added, where one process adds the encoder's row by row onto the LM head's; even
# with m = 1 the order differs, so nothing against one process is bit-identical): losses and norms 4e-6 relative,
# parameters 1e-5 absolute at lr 1e-3. A lost message, a wrong micro-batch order, a missing tied-
# gradient sum or a stage running the wrong layers moves them by orders of magnitude more (see
# test/README.md). Logs of each run: build/pp/. Ends with "test_pp: N passed, M failed".
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
CPU=${CPU:-./train_gpt_cpu}
EMU=${EMU:-./build/train_gpt_emu}
EMU16=${EMU16:-./build/train_gpt_emu_bf16}
CHECK="python3 test/ddp_zero_check.py"
LOG=build/pp
mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad, check, badlayout, train, same_samples

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
D="$tmp/data"
common=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" --tokenizer "$D/addition_tokenizer.bin"
        -b 4 -t 32 --steps 4 --lr 1e-3 --warmup 1 --lr-final 0.1 --weight-decay 0.1 --grad-clip 0
        --val-every 2 --val-steps 1 --sample-every 2 --sample-len 6 --checkpoint-every 2
        --eval-file "$D/addition_test.bin")

tied() {  # NAME RUN: the two copies of the tied embedding are the same values at the end
    local line
    line=$(grep -a '^tied embedding' "$LOG/$2.log")
    if [[ "$line" == "tied embedding: max |first stage - last stage| = 0 over "* ]]; then ok "$1: $line"
    else bad "$1: tied embedding copies: '${line:-no line}' ($LOG/$2.log)"; fi
}
# pp NAME NP REF ARGS...: a pipeline run against the one-process run REF (and its tied embedding)
pp() {
    local name=$1 np=$2 ref=$3; shift 3
    train "$name" "$np" "$CPU" "$@" &&
        check compare "$name ($*) vs 1 process" "$tmp/$name" "$tmp/$ref" 4e-6 1e-5 &&
        tied "$name" "$name"
}

timeout 60 "$CPU" --model d4,C=32,NH=4,maxT=64,V=257 "${common[@]}" --steps 1 --lr 0 --checkpoint-every 1 \
    --val-every 0 --sample-every 0 --output-dir "$tmp/seed" > "$LOG/seed.log" 2>&1 || bad "seed checkpoint: see $LOG/seed.log"
timeout 60 "$CPU" --model d8,C=32,NH=4,maxT=64,V=257 "${common[@]}" --steps 1 --lr 0 --checkpoint-every 1 \
    --val-every 0 --sample-every 0 --output-dir "$tmp/seed8" > "$LOG/seed8.log" 2>&1 || bad "seed checkpoint d8: see $LOG/seed8.log"
common+=(--model "$tmp/seed/model_00000001.bin")

# 1. equivalence with one process (B*T = 128 tokens per micro-batch: total 512 is m = 4 on one dp rank)
for tb in 128 256 384 512; do train one_$tb 0 "$CPU" --total-batch $tb; done
train one_512_clip 0 "$CPU" --total-batch 512 --grad-clip 0.5
pp pp2 2 one_512 --pp 2 --total-batch 512 && same_samples "pp 2 sampling" pp2 one_512
pp pp4 4 one_512 --pp 4 --total-batch 512
pp gpipe_pp2 2 one_512 --pp 2 --schedule gpipe --total-batch 512
pp gpipe_pp4 4 one_512 --pp 4 --schedule gpipe --total-batch 512
pp il_pp2v2 2 one_512 --pp 2 --schedule interleaved --vpp 2 --total-batch 512 && same_samples "interleaved sampling" il_pp2v2 one_512
pp zb_pp2 2 one_512 --pp 2 --schedule zb-h1 --total-batch 512
pp zb_pp4 4 one_512 --pp 4 --schedule zb-h1 --total-batch 512
pp pp2_m1 2 one_128 --pp 2 --total-batch 128
pp pp4_m2 4 one_256 --pp 4 --total-batch 256
pp zb_pp4_m3 4 one_384 --pp 4 --schedule zb-h1 --total-batch 384
pp gpipe_pp2_m3 2 one_384 --pp 2 --schedule gpipe --total-batch 384
pp d2p2z1 4 one_512 --pp 2 --zero 1 --total-batch 512
pp d2p2z3il 4 one_512 --pp 2 --zero 3 --schedule interleaved --vpp 2 --total-batch 512
pp t2p2 4 one_512 --pp 2 --tp 2 --total-batch 512
pp d2t2p2z1sp 8 one_512 --pp 2 --tp 2 --zero 1 --sequence-parallel 1 --total-batch 512 &&
    same_samples "dp 2 x tp 2 x pp 2 sampling" d2t2p2z1sp one_512
pp zb_d2t2p2z3sp 8 one_512 --pp 2 --tp 2 --zero 3 --sequence-parallel 1 --schedule zb-h1 --total-batch 512
pp pp2_clip 2 one_512_clip --pp 2 --total-batch 512 --grad-clip 0.5
# the same arithmetic, the same bytes: every schedule and pipeline depth sums each gradient in the same
# order (per micro-batch in order on each stage, the tied embedding's two parts added once), and B + W
# is the fused backward bit for bit
for n in gpipe_pp2 il_pp2v2 zb_pp2 pp4 gpipe_pp4 zb_pp4; do check same "$n vs pp2 (1f1b)" "$tmp/$n" "$tmp/pp2"; done
check same "dp 2 x pp 2: ZeRO-3 interleaved vs ZeRO-1 1f1b" "$tmp/d2p2z3il" "$tmp/d2p2z1"
check same "dp 2 x tp 2 x pp 2 sp: ZeRO-3 zb-h1 vs ZeRO-1 1f1b" "$tmp/zb_d2t2p2z3sp" "$tmp/d2t2p2z1sp"
for r in selective full; do
    train pp2_$r 2 "$CPU" --pp 2 --total-batch 512 --recompute $r &&
        check same "pp 2 --recompute $r vs without" "$tmp/pp2_$r" "$tmp/pp2"
    train zb_pp2_$r 2 "$CPU" --pp 2 --schedule zb-h1 --total-batch 512 --recompute $r &&
        check same "zb-h1 pp 2 --recompute $r vs without" "$tmp/zb_pp2_$r" "$tmp/zb_pp2"
done

# 2. memory: each stage's model states against Table 1 with its own Psi
for n in pp2 pp4 d2p2z1 d2p2z3il d2t2p2z1sp; do check memory "$n memory" "$tmp/$n.json"; done

# 3. activation memory: the slots allocated == the simulator's peak; bytes proportional to them
python3 - "$tmp" <<'PY' && pass=$((pass+1)) || fail=$((fail+1))
import json, sys
g, f, z = (json.load(open(sys.argv[1] + "/%s.json" % n)) for n in ("gpipe_pp4", "pp4", "zb_pp4"))
good = all(r["activation_slots"] == r["sim_peak_live"] for r in z["ranks"])  # zb-h1: alive until W
P, m, rows = 4, g["ranks"][0]["m"], []
for rg, rf in zip(sorted(g["ranks"], key=lambda r: r["pp_rank"]), sorted(f["ranks"], key=lambda r: r["pp_rank"])):
    r = rg["pp_rank"]
    good &= rg["activation_slots"] == rg["sim_peak_live"] == m and rf["activation_slots"] == rf["sim_peak_live"] == min(P - r, m)
    good &= rg["pipeline_activation_bytes"] * rf["activation_slots"] == rf["pipeline_activation_bytes"] * rg["activation_slots"]
    rows.append("rank %d: gpipe %d slots %d B, 1f1b %d slots %d B" % (r, rg["activation_slots"], rg["pipeline_activation_bytes"],
                rf["activation_slots"], rf["pipeline_activation_bytes"]))
print(("ok   " if good else "FAIL ") + "pp 4, m = %d: activation slots == simulator peak (gpipe m, 1f1b min(P-r, m), zb-h1 %s) and "
      "bytes in proportion: %s" % (m, [r["activation_slots"] for r in sorted(z["ranks"], key=lambda r: r["pp_rank"])], "; ".join(rows)))
sys.exit(0 if good else 1)
PY

# 4. the bubble of real runs at pp 2 (a wider model, so that compute outweighs the messages)
bubble_run() {  # NAME TOTAL_BATCH ARGS...
    local name=$1 tb=$2; shift 2
    EMU_DEVICES=8 timeout 300 "${MPIRUN[@]}" -np 2 "$CPU" --model d4,C=128,NH=4,maxT=64,V=257 --train-data "$D/addition_train.bin" \
        -b 8 -t 64 --steps 3 --total-batch "$tb" --val-data "" --tokenizer "" --val-every 0 --sample-every 0 --pp 2 \
        --trace "$tmp/$name.trace.json" --output-dir "$tmp/$name" "$@" > "$LOG/$name.log" 2>&1 || bad "$name: see $LOG/$name.log"
}
bubble_run bub_m2 1024
bubble_run bub_m8 4096
bubble_run bub_zb_m8 4096 --schedule zb-h1
python3 - "$tmp" <<'PY' && pass=$((pass+1)) || fail=$((fail+1))
import json, sys
good, rows, meas = True, [], {}
for name, m, kinds in (("bub_m2", 2, "FB"), ("bub_m8", 8, "FB"), ("bub_zb_m8", 8, "FBW")):
    t = json.load(open("%s/%s.trace.json" % (sys.argv[1], name)))
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    for r in (0, 1):  # every op of the schedule once per rank
        names = sorted(e["name"] for e in ev if e["pid"] == r and e["cat"] in ("F", "B", "W"))
        good &= names == sorted("%s%d" % (k, i) for k in kinds for i in range(m))
    o = t["otherData"]
    meas[name] = o["measured_bubble"]
    good &= abs(o["measured_bubble"] - o["simulated_bubble"]) <= 0.15
    rows.append("%s m = %d: measured %.3f, simulated with the measured op times %.3f%s" % (o["schedule"], m, o["measured_bubble"],
                o["simulated_bubble"], ", formula (P-1)/(m+P-1) = %.3f" % (1.0 / (m + 1)) if kinds == "FB" else ""))
good &= meas["bub_m2"] > meas["bub_m8"]
print(("ok   " if good else "FAIL ") + "pp 2 bubble from the trace (wall clock, 2 cores; each op once per rank; within 0.15 of the simulator; "
      "m = 2 > m = 8): " + "; ".join(rows))
sys.exit(0 if good else 1)
PY
# the real run's trace drawn (scripts/plot_trace.py; test_plot_trace.sh checks the drawing box for box)
if python3 scripts/plot_trace.py "$tmp/bub_zb_m8.trace.json" -o "$LOG/bub_zb_m8.png" > /dev/null 2>&1 &&
   [ "$(head -c 8 "$LOG/bub_zb_m8.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; then
    ok "the zb-h1 trace drawn: $LOG/bub_zb_m8.png"
else bad "scripts/plot_trace.py on $tmp/bub_zb_m8.trace.json"; fi

# 5. resume across layouts
train res_p2to1 0 "$CPU" --total-batch 512 --resume "$tmp/pp2/state_00000002.bin" &&
    check compare "resume: 1 process from a pp 2 state vs pp 2" "$tmp/res_p2to1" "$tmp/pp2" 4e-6 1e-5
train res_1top4 4 "$CPU" --pp 4 --total-batch 512 --resume "$tmp/one_512/state_00000002.bin" &&
    check compare "resume: pp 4 from a 1-process state vs 1 process" "$tmp/res_1top4" "$tmp/one_512" 4e-6 1e-5
train res_d2t2p2tod8 8 "$CPU" --total-batch 512 -b 1 --val-steps 4 --resume "$tmp/d2t2p2z1sp/state_00000002.bin" &&
    check compare "resume: dp 8 (B = 1) from a dp 2 x tp 2 x pp 2 state vs dp 2 x tp 2 x pp 2" "$tmp/res_d2t2p2tod8" "$tmp/d2t2p2z1sp" 4e-6 1e-5

# 6. the emulated CUDA build
if [ -x "$EMU" ]; then
    train emu_pp2 2 "$EMU" --pp 2 --total-batch 512 &&
        check compare "emulated CUDA FP32 pp 2 vs CPU 1 process" "$tmp/emu_pp2" "$tmp/one_512" 1e-5 1e-5
    train emu_zb_pp2 2 "$EMU" --pp 2 --schedule zb-h1 --total-batch 512 &&
        check compare "emulated CUDA FP32 zb-h1 pp 2 vs CPU 1 process" "$tmp/emu_zb_pp2" "$tmp/one_512" 1e-5 1e-5
    train emu_t2p2sp 4 "$EMU" --pp 2 --tp 2 --sequence-parallel 1 --total-batch 512 &&
        check compare "emulated CUDA FP32 tp 2 x pp 2 sp vs CPU 1 process" "$tmp/emu_t2p2sp" "$tmp/one_512" 1e-5 1e-5
else bad "no $EMU (make build/train_gpt_emu)"; fi
if [ -x "$EMU16" ]; then
    train emu16_one 0 "$EMU16" --total-batch 512 &&
    train emu16_pp2 2 "$EMU16" --pp 2 --total-batch 512 &&
        check update "emulated CUDA BF16 pp 2 vs its 1 process" "$tmp/emu16_pp2" "$tmp/emu16_one" "$tmp/seed/model_00000001.bin" 2e-3 0.08
else bad "no $EMU16 (make build/train_gpt_emu_bf16)"; fi
# the CPU build in BF16: its activations and gradients cross the stages as bf16 over MPI (16-bit words)
CPU16=${CPU16:-./build/train_gpt_cpu_bf16}
if [ -x "$CPU16" ]; then
    train cpu16_one 0 "$CPU16" --total-batch 512 &&
    train cpu16_pp2 2 "$CPU16" --pp 2 --total-batch 512 &&
        check update "CPU BF16 pp 2 vs its 1 process" "$tmp/cpu16_pp2" "$tmp/cpu16_one" "$tmp/seed/model_00000001.bin" 2e-3 0.08
else bad "no $CPU16 (make build/train_gpt_cpu_bf16)"; fi

# 7. bad layouts: one line (from rank 0), non-zero exit, nothing written (badlayout: test/mpi_lib.sh)
badlayout pp8 8 "--pp 8" --pp 8 --total-batch 1024
badlayout vpp3 2 "--vpp 3" --pp 2 --schedule interleaved --vpp 3 --total-batch 768
badlayout il_m3 2 "multiple of" --pp 2 --schedule interleaved --vpp 2 --total-batch 384
badlayout vpp_1f1b 2 "--vpp 2 needs" --pp 2 --vpp 2
badlayout vpp_pp1 1 "--vpp 2" --vpp 2 --schedule interleaved
badlayout sched 2 "--schedule" --pp 2 --schedule 2f2b
# the emulated build too: its NCCL watchdog thread calls MPI every 20 ms, and once ran on beside MPI_Finalize after
# the line (a segfault, exit 139: llm/comm/comm_mesh.h's comm_exit stops it first now)
if [ -x "$EMU" ]; then EMU_DEVICES=8 CPU=$EMU badlayout emu_vpp3 2 "--vpp 3" --pp 2 --schedule interleaved --vpp 3 --total-batch 768
else bad "no $EMU (make build/train_gpt_emu)"; fi

# 9. the V schedules (llm/parallel/schedule_v.h: zbv, dualpipev; two chunks per rank, m >= 2P): against one process,
# the tied embedding's one copy on pp rank 0, the activation slots against the simulator's peak (zbv: at most
# 2P chunk-micro-batches, 1F1B's P whole stages; dualpipev: 2P + 1, the DualPipe README's PP + 1). pp 4 needs
# 8 virtual stages: an 8-layer model of its own
ppv() {  # NAME NP REF ARGS...: pp, with the V's one copy of the tied embedding
    local name=$1 np=$2 ref=$3 line; shift 3
    train "$name" "$np" "$CPU" "$@" && check compare "$name ($*) vs 1 process" "$tmp/$name" "$tmp/$ref" 4e-6 1e-5 || return 1
    line=$(grep -a '^tied embedding' "$LOG/$name.log")
    if [[ "$line" == "tied embedding: one copy, the first and the last stage on pp rank 0" ]]; then ok "$name: $line"
    else bad "$name: tied embedding: '${line:-no line}' ($LOG/$name.log)"; fi
}
train one_1024 0 "$CPU" --total-batch 1024
ppv zbv_pp2 2 one_512 --pp 2 --schedule zbv --total-batch 512 && same_samples "zbv pp 2 sampling" zbv_pp2 one_512
ppv dpv_pp2 2 one_512 --pp 2 --schedule dualpipev --total-batch 512
ppv dpv_d2p2z1 4 one_1024 --pp 2 --zero 1 --schedule dualpipev --total-batch 1024
ppv zbv_t2p2 4 one_512 --pp 2 --tp 2 --schedule zbv --total-batch 512
ppv zbv_d2p2z3 4 one_1024 --pp 2 --zero 3 --schedule zbv --total-batch 1024
common8=("${common[@]:0:${#common[@]}-2}" --model "$tmp/seed8/model_00000001.bin")
c4=("${common[@]}"); common=("${common8[@]}")
train one8_1024 0 "$CPU" --total-batch 1024
ppv zbv_pp4 4 one8_1024 --pp 4 --schedule zbv --total-batch 1024
ppv dpv_pp4 4 one8_1024 --pp 4 --schedule dualpipev --total-batch 1024 && same_samples "dualpipev pp 4 sampling" dpv_pp4 one8_1024
common=("${c4[@]}")
python3 - "$tmp" <<'PY' && pass=$((pass+1)) || fail=$((fail+1))
import json, sys
good, rows = True, []
for name, P, want in (("zbv_pp2", 2, 4), ("dpv_pp2", 2, 5), ("zbv_pp4", 4, 8), ("dpv_pp4", 4, 9)):
    ranks = sorted(json.load(open("%s/%s.json" % (sys.argv[1], name)))["ranks"], key=lambda r: r["pp_rank"])
    # the simulator's peak per rank (both chunks together) is the schedule's; the executor keeps slots per chunk
    # (each chunk's own peak: llm/parallel/schedule.h pipe_peak_slots), at least that many and at most one more per chunk
    good &= max(r["sim_peak_live"] for r in ranks) == want
    good &= all(r["sim_peak_live"] <= r["activation_slots"] <= r["sim_peak_live"] + 2 for r in ranks)
    good &= all(r["stages"] == [r["pp_rank"], 2 * P - 1 - r["pp_rank"]] and r["head_pp_rank"] == 0 for r in ranks)
    rows.append("%s slots %s sim peak %s" % (name, [r["activation_slots"] for r in ranks], [r["sim_peak_live"] for r in ranks]))
print(("ok   " if good else "FAIL ") + "V schedules: stages (r, 2P-1-r), the head on pp rank 0, simulator peak largest zbv 2P, dualpipev 2P + 1; "
      "slots per chunk summed within 2 of it: " + "; ".join(rows))
sys.exit(0 if good else 1)
PY
badlayout zbv_m 2 "--schedule zbv: expected at least" --pp 2 --schedule zbv --total-batch 384
badlayout dpv_vpp3 2 "--vpp 3" --pp 2 --schedule dualpipev --vpp 3 --total-batch 1024

# 8. the ledger's point-to-point rows against the schedule's messages, the allocator's peaks against what
# must have been live (reports of the runs above)
for n in pp2 pp4 gpipe_pp2 gpipe_pp4 il_pp2v2 zb_pp2 zb_pp4 pp2_m1 pp4_m2 zb_pp4_m3 gpipe_pp2_m3 d2p2z1 d2p2z3il t2p2 \
         d2t2p2z1sp zb_d2t2p2z3sp zbv_pp2 dpv_pp2 dpv_d2p2z1 zbv_t2p2 zbv_d2p2z3 zbv_pp4 dpv_pp4; do
    [ -f "$tmp/$n.json" ] || { bad "$n: no report $tmp/$n.json"; continue; }
    check p2p "$n p2p ledger" "$tmp/$n.json"
    check peaks "$n allocator peaks" "$tmp/$n.json"
done
check peaks_pp "pp 4 activation peaks" "$tmp/gpipe_pp4.json" "$tmp/pp4.json"
check peaks_pp "pp 2 activation peaks" "$tmp/gpipe_pp2.json" "$tmp/pp2.json"

echo "test_pp: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
