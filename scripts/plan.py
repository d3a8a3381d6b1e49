#!/usr/bin/env python3
"""plan.py: the scale planner. For a model, a layout and a cluster it predicts, per GPU, the memory by kind, the
bytes each communication group sends per step and the link tier its ring crosses, the compute, communication and
bubble times, the step time, tokens/s and MFU; --search ranks the layouts that fit; --json prints per rank the
keys the trainer's --report-json writes, so that test/test_plan.sh can require them equal, byte for byte.

Why a script and not a --plan mode of the trainer: the planner must answer for 16,384 GPUs and 405B parameters on
a laptop, without MPI, without allocating, and it is arithmetic over the trainer's layout rules, not a use of its
kernels; a Python script reads as the formulas and plots its answer (matplotlib). What it cannot re-derive without a
second formula, the pipeline schedule's bubble, slots and messages, it takes from the trainer's own simulator
(llm/parallel/schedule.h) through build/pipeline_sim --json.

Every memory formula (scripts/plan_memory.py) is the trainer's allocation, term by term, with the file that makes it:
  parameters, gradients  llm/parallel/dp.h dp_init: the packed units (llm/model/units.h: each unit padded to a
                         multiple of 8 x the gradient group's size values), or 1/N of them when ZeRO shards them
                         (an experts unit under --ep: E/ep experts, sharded over edp = N/ep, llm/parallel/zero.h)
  moments, master        llm/ops/optimizer.h: AdamW m and v (FP32), FP32 master weights in 16-bit builds
  activations            llm/model/stage.h stage_init_cp: per slot (the schedule's live micro-batches) and layer,
                         llm/model/block.h's fields the recompute policy keeps, each rounded up to 64 bytes; a
                         moe layer's (llm/model/moe.h), with --ep its received rows sized for the worst case
  comm buffers           llm/parallel/pipeline.h's receive/send buffers; ZeRO-2/3's unit pool (llm/parallel/bufpool.h)
  workspace              the stage's buffers and recompute buffer, sequence parallelism's gather buffers, the
                         sampler's decode state, the cuBLASLt workspace (CUDA builds)
The parts: plan_layout.py (the model, its units, the pipeline split, the simulator), plan_memory.py (bytes per
kind), plan_ledger.py (the collectives per group), plan_time.py (clusters, FLOPs, links, the ring cost),
plan_plot.py (the picture); this file puts them together per rank, prints, searches. Usage: scripts/plan.py --help.
"""
import argparse
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plan_layout import KINDS, die, num_parameters, parse_model, simulate  # noqa: E402
from plan_ledger import norm_owned, rank_ledger  # noqa: E402
from plan_memory import rank_memory  # noqa: E402
from plan_plot import draw  # noqa: E402
from plan_time import CLUSTERS, comm_time, group_tier, step_flops  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------

def layout_error(a):
    cfg = a["cfg"]
    if a["world"] != a["dp"] * a["tp"] * a["pp"] * a["cp"]:
        return f"-np {a['world']}: expected dp x tp x pp x cp = {a['dp']} x {a['tp']} x {a['pp']} x {a['cp']}"
    if cfg["NH"] % a["tp"] or cfg["Vp"] % a["tp"] or cfg["C"] % a["tp"]:
        return f"--tp {a['tp']}: expected to divide NH = {cfg['NH']}, C = {cfg['C']} and Vp = {cfg['Vp']}"
    if a["pp"] * a["V"] > cfg["L"]:
        return f"--pp {a['pp']} x --vpp {a['V']}: more stages than the model's {cfg['L']} layers"
    if a["T"] % (2 * a["cp"]) and a["cp"] > 1:
        return f"--cp {a['cp']}: expected -t {a['T']} to divide into 2 x cp chunks"
    if a["sp"] and a["tp"] > 1 and (a["T"] // a["cp"]) % a["tp"]:
        return f"--sequence-parallel: expected the sequence -t {a['T']} to divide over --tp {a['tp']}"
    if a["cp"] > 1 and a["cp_impl"] == "ulysses" and cfg["NH"] // a["tp"] % a["cp"]:
        return f"--cp-impl ulysses: expected the rank's NH/tp = {cfg['NH'] // a['tp']} heads to divide over --cp {a['cp']}"
    if a["ep"] > 1 and cfg["E"] == 0:
        return f"--ep {a['ep']}: expected a model with experts (--experts > 0), found a dense one"
    if a["ep"] > 1 and (cfg["E"] % a["ep"] or a["dp"] % a["ep"]):
        return f"--ep {a['ep']}: expected a divisor of the experts per layer {cfg['E']} and of the dp size {a['dp']} (ep folds into dp)"
    if cfg["E"] > 0 and a["fp8"] != "none":
        return (f"--fp8 {a['fp8']} with --experts {cfg['E']}: not modelled (the trainer runs the experts in FP8, but an "
                "expert's quantized operands grow to the most rows routed to it, which the routing decides)")
    if a["total_batch"] % (a["B"] * a["T"] * a["dp"]):
        return f"--total-batch: expected a multiple of B*T*dp = {a['B'] * a['T'] * a['dp']}, found {a['total_batch']}"
    return None


def plan(a, cl):
    """the whole prediction for one layout: per rank memory and ledger, and the time model"""
    err = layout_error(a)
    if err:
        return {"error": err}
    a["m"] = a["total_batch"] // (a["B"] * a["T"] * a["dp"])
    a["split_w"] = a["schedule"] in ("zb-h1", "zbv", "dualpipev")
    if a["schedule"] in ("zbv", "dualpipev") and a["V"] == 1:
        a["V"] = 2
    sim = simulate(a["schedule"], a["pp"], a["m"], a["V"]) if (a["pp"] > 1 or a["V"] > 1) else \
        {"bubble": 0.0, "ranks": [{"stages": [0], "slots": [1], "num_send": 0, "send_F": 0, "send_B": 0, "recv_F": 0, "recv_B": 0}]}
    ranks = []
    per_pp = [rank_memory(a, p, sim) for p in range(a["pp"])]
    # every rank for --json (the test's sizes); at scale, one rank per pp stage (the others repeat it: only the
    # ZeRO blocks' last-rank pads differ)
    every = a.get("json", a["world"] <= 64)
    for r in (range(a["world"]) if every else [p * a["tp"] * a["cp"] for p in range(a["pp"])]):
        tp_rank = r % a["tp"]
        cp_rank = r // a["tp"] % a["cp"]
        pp_rank = r // (a["tp"] * a["cp"]) % a["pp"]
        dp_rank = r // (a["tp"] * a["cp"] * a["pp"])  # = edp_rank x ep + ep_rank (llm/comm/mesh.h's fold)
        rm = dict(per_pp[pp_rank])
        led = rank_ledger(a, (dp_rank, pp_rank, cp_rank, tp_rank), rm, sim)
        if a["sp"] and a["tp"] > 1:  # dp_reduce_norm_grads_tp's buffer, for the call, freed after it
            rm["peak"] = dict(rm["peak"])
            nb = norm_owned(a, rm, dp_rank * a["cp"] + cp_rank) * a["e"]
            rm["peak"]["comm_buffers"] = max(rm["peak"]["comm_buffers"], rm["mem"]["comm_buffers"] + nb)
        ranks.append({"rank": r, "dp_rank": dp_rank, "tp_rank": tp_rank, "pp_rank": pp_rank, "cp_rank": cp_rank, "ep_rank": dp_rank % a["ep"],
                      "shard_parameters": rm["shard_parameters"], "packed_parameters": rm["packed"], "rm": rm, "led": led})
    # time: compute from FLOPs at a stated efficiency; communication by the ring model over each group's tier
    cfg = dict(a["cfg"], T=a["T"])
    tokens = a["total_batch"]
    flops = step_flops(cfg, tokens)
    # recompute adds forward work the model FLOPs do not count: selective the attention core (a third of its
    # 12 L T C per token), full the whole forward (a third of the step)
    attn = 12 * cfg["L"] * a["T"] * cfg["C"] * tokens
    extra = {"none": 0.0, "selective": attn / 3, "full": flops / 3}[a["recompute"]]
    peak = (cl["fp8_tflops"] if a["fp8"] != "none" else cl["bf16_tflops"]) * 1e12
    compute = (flops + extra) / a["world"] / (peak * a["eff"])
    bubble = sim["bubble"]
    worst = max(ranks, key=lambda x: x["rm"]["mem"]["activations"])
    m = a["m"]
    nunits = max(len(worst["rm"]["held"]), 1)
    comm, exposed = {}, {}
    # exposed, what the trainer overlaps: dp's gradient reductions start unit by unit during the last micro-batch's
    # backward (2/3 of its compute), so all but the last unit's can hide there; ZeRO-3's gathers are prefetched one
    # unit ahead during every micro-batch (hidden behind the compute but for the first unit of each pass); ZeRO-1/2's
    # gathers of the updated parameters and the tied embedding's sum follow the step, exposed; tp's and cp's
    # collectives sit between the ops that need them (the trainer does not overlap them), exposed; pp's P2P is in
    # the simulator's plan (its latency here zero), counted in the bubble; ep's all-to-alls sit between the router
    # and the experts (the trainer overlaps none of them: DualPipe's overlap is not built), exposed; the experts'
    # gradient reductions over edp overlap like dp's
    for (kind, group), (calls, payload, sent) in worst["led"].rows.items():
        tier = group_tier(a, group, cl)
        t = comm_time(kind, worst["led"].sizes[group], sent, calls, tier, cl)
        key = (group, tier)
        comm[key] = comm.get(key, 0.0) + t
        if group in ("dp", "edp") and payload / max(calls, 1) > 64 and kind in ("all_reduce", "reduce_scatter"):
            x = max(t - 2.0 / 3.0 * compute / m, t / nunits)
        elif group in ("dp", "edp") and kind == "all_gather" and a["zero"] == 3:
            x = max(t - compute, t / (2 * m * nunits))
        elif group in ("pp",) and kind in ("send", "recv"):
            x = 0.0
        else:
            x = t
        exposed[key] = exposed.get(key, 0.0) + x
    busy = compute + sum(v for (g, _), v in exposed.items() if g in ("tp", "cp", "ep"))
    step = busy / (1 - bubble) + sum(v for (g, _), v in exposed.items() if g not in ("tp", "cp", "ep"))
    mfu = flops / a["world"] / step / (cl["bf16_tflops"] * 1e12) if step > 0 else 0.0
    return {"a": a, "sim": sim, "ranks": ranks, "flops": flops, "compute_s": compute, "comm_s": comm, "exposed_s": exposed,
            "bubble": bubble, "bubble_s": busy / (1 - bubble) - busy, "step_s": step, "tokens_per_s": tokens / step if step else 0,
            "mfu": mfu, "mem_gib": max(sum(x["rm"]["peak"].values()) for x in ranks) / 2**30}


def rank_json(r):
    out = {k: r[k] for k in ("rank", "dp_rank", "tp_rank", "pp_rank", "cp_rank", "ep_rank", "shard_parameters", "packed_parameters")}
    for k in KINDS:
        out[k + "_bytes"] = r["rm"]["mem"][k]
        out[k + "_peak_bytes"] = r["rm"]["peak"][k]
    out["ledger_step"] = r["led"].json(r["rank"])
    return out


def gib(x):
    return f"{x / 2**30:.2f} GiB" if x >= 2**28 else f"{x / 2**20:.2f} MiB" if x >= 2**18 else f"{x} B"


def print_plan(p, cl, name):
    a = p["a"]
    print(f"model {a['model']}: L={a['cfg']['L']} C={a['cfg']['C']} NH={a['cfg']['NH']} Vp={a['cfg']['Vp']} "
          f"{num_parameters(a['cfg']) / 1e9:.3f}B parameters | {a['world']} GPUs = dp {a['dp']} x tp {a['tp']} x pp {a['pp']} x cp {a['cp']}"
          + (f" (ep {a['ep']} of dp: {a['cfg']['E'] // a['ep']} of {a['cfg']['E']} experts per rank)" if a["ep"] > 1 else "") +
          f" | ZeRO-{a['zero']} | {a['precision']} | B={a['B']} T={a['T']} m={a['m']} | recompute {a['recompute']} | cluster {name}")
    seen = set()
    for r in p["ranks"]:
        if r["pp_rank"] in seen:
            continue
        seen.add(r["pp_rank"])
        m = r["rm"]["peak"]
        print(f"pp rank {r['pp_rank']} (rank {r['rank']}): memory per GPU {gib(sum(m.values()))} of {cl['mem_gib']} GiB: " +
              ", ".join(f"{k} {gib(m[k])}" for k in KINDS) + f" | activation slots {r['rm']['slots']}")
    r = max(p["ranks"], key=lambda x: x["rm"]["mem"]["activations"])
    print(f"bytes per step (rank {r['rank']}; ring model, ZeRO paper sec. 7) and the link each group's ring crosses:")
    for (kind, group), (calls, payload, sent) in sorted(r["led"].rows.items()):
        print(f"  {kind:15s} {group:6s} size {r['led'].sizes[group]:6d} calls {calls:6d} payload {gib(payload):>12s} sent {gib(sent):>12s}"
              f"  {group_tier(a, group, cl)}")
    print(f"time per step: compute {p['compute_s'] * 1e3:.2f} ms (model FLOPs {p['flops']:.3g} at {a['eff']:.0%} of peak), " +
          ", ".join(f"{g} on {t} {v * 1e3:.2f} ms ({p['exposed_s'][(g, t)] * 1e3:.2f} exposed)" for (g, t), v in sorted(p["comm_s"].items())) +
          f", bubble {p['bubble']:.4f} (the simulator) = {p['bubble_s'] * 1e3:.2f} ms | step {p['step_s'] * 1e3:.2f} ms, "
          f"{p['tokens_per_s']:.4g} tokens/s, MFU {p['mfu']:.1%}")


def build_args(ns):
    cfg = parse_model(ns.model, ns.experts, ns.top_k, ns.moe_every)
    world = ns.np
    tp, pp, cp = ns.tp, ns.pp, ns.cp
    dp = ns.dp or max(world // (tp * pp * cp), 1)
    tb = ns.total_batch or ns.batch * ns.seq_len * dp
    e = {"fp32": 4, "bf16": 2, "fp16": 2}[ns.precision]
    return {"model": ns.model, "cfg": cfg, "world": world, "dp": dp, "tp": tp, "pp": pp, "cp": cp, "sp": ns.sequence_parallel,
            "cp_impl": ns.cp_impl, "ep": ns.ep, "capf": ns.capacity_factor, "ep_buffers": ns.ep_buffers, "schedule": ns.schedule, "V": ns.vpp, "zero": ns.zero, "recompute": ns.recompute,
            "precision": ns.precision, "e": e, "fp8": ns.fp8, "B": ns.batch, "T": ns.seq_len, "total_batch": tb,
            "eff": ns.efficiency, "build": ns.build}


def search(ns, cl, name):
    """every layout of the world size that the trainer accepts, ranked by predicted step time; the rejected best"""
    world = ns.np
    fits, rejected = [], []
    cap = cl["mem_gib"] * 2**30
    for tp in [t for t in (1, 2, 4, 8, 16) if world % t == 0 and t <= cl["gpus_per_node"]]:
        for cp in [c for c in (1, 2, 4, 8, 16, 32) if world % (tp * c) == 0]:
            for pp in [p for p in (1, 2, 4, 8, 16, 32, 64, 128) if world % (tp * cp * p) == 0]:
                dp = world // (tp * cp * pp)
                # expert parallelism (a moe model): every ep of the dp ranks that divides the experts
                eps = [e for e in (1, 2, 4, 8, 16, 32, 64, 128, 256) if ns.experts and dp % e == 0 and ns.experts % e == 0] or [1]
                for zero, ep in [(z, e) for z in (0, 1, 2, 3) for e in eps]:
                    if dp == 1 and zero:
                        continue
                    for rc in ("none", "selective", "full"):
                        for B in (1, 2, 4):
                            ns2 = argparse.Namespace(**vars(ns))
                            ns2.tp, ns2.pp, ns2.cp, ns2.dp, ns2.zero, ns2.recompute, ns2.batch = tp, pp, cp, dp, zero, rc, B
                            ns2.ep = ep
                            ns2.sequence_parallel = 1 if tp > 1 else 0
                            ns2.schedule = ns.schedule if pp > 1 else "1f1b"
                            ns2.vpp = 1
                            a = build_args(ns2)
                            a["json"] = False  # one rank per stage
                            if a["total_batch"] % (B * a["T"] * dp):
                                continue
                            if pp > 1 and a["total_batch"] // (B * a["T"] * dp) < pp:
                                continue
                            p = plan(a, cl)
                            if "error" in p:
                                continue
                            mem = max(sum(r["rm"]["peak"].values()) for r in p["ranks"])
                            desc = f"dp {dp} tp {tp} pp {pp} cp {cp}" + (f" ep {ep}" if ep > 1 else "") + f" zero {zero} recompute {rc} -b {B} (m {a['m']})"
                            if pp > 1:
                                desc += f" {a['schedule']}"
                            (fits if mem <= cap else rejected).append((p["step_s"], mem, desc, p))
    fits.sort(key=lambda x: (round(x[0], 6), x[1]))
    rejected.sort(key=lambda x: (round(x[0], 6), x[1]))
    print(f"search: {ns.model} on {world} x {name} ({cl['mem_gib']} GiB), global batch {ns.total_batch} tokens of T = {ns.seq_len}: "
          f"{len(fits)} layouts fit, {len(rejected)} do not")
    for s, mem, desc, p in fits[:ns.top]:
        print(f"  fits  step {s * 1e3:10.1f} ms  MFU {p['mfu']:6.1%}  memory {mem / 2**30:7.1f} GiB  {desc}")
    for s, mem, desc, p in rejected[:ns.top]:
        worst = max(p["ranks"], key=lambda r: sum(r["rm"]["peak"].values()))["rm"]["peak"]
        big = max(KINDS, key=lambda k: worst[k])
        print(f"  no    step {s * 1e3:10.1f} ms  needs {mem / 2**30:7.1f} GiB > {cl['mem_gib']} GiB (largest: {big} {worst[big] / 2**30:.1f} GiB)  {desc}")
    return fits, rejected


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line naming the flag, exit 2 (not argparse's usage block)
        die(f"{message} (see scripts/plan.py --help)")


def main(argv=None):
    ap = Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", "-e", default="d12", help="a model descriptor dN[,C=..][,NH=..][,maxT=..][,V=..] as the trainer takes (default d12)")
    ap.add_argument("--batch", "-b", type=int, default=4, help="micro-batch size B per process (default 4)")
    ap.add_argument("--seq-len", "-t", type=int, default=1024, help="sequence length T (default 1024)")
    ap.add_argument("--total-batch", "-d", type=int, default=0, help="tokens per optimizer step (default B*T*dp)")
    ap.add_argument("-np", "--np", type=int, default=1, help="world size: the GPUs (processes) of the run (default 1)")
    ap.add_argument("--dp", type=int, default=0, help="data-parallel ranks (default 0: np / (tp*pp*cp))")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("--cp-impl", choices=["ring", "ulysses"], default="ring")
    ap.add_argument("--sequence-parallel", type=int, choices=[0, 1], default=0)
    ap.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"])
    ap.add_argument("--vpp", type=int, default=1)
    ap.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=0)
    ap.add_argument("--recompute", choices=["none", "selective", "full"], default="none")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="bf16",
                    help="the build's storage (PRECISION=...; the CPU trainer train_gpt_cpu is fp32) (default bf16)")
    ap.add_argument("--fp8", choices=["none", "delayed", "current", "block", "mx"], default="none",
                    help="FP8 linears: the time model uses the FP8 peak (memory: their scales not modelled)")
    ap.add_argument("--ep", type=int, default=1, help="expert-parallel ranks, a fold of dp: each moe layer's experts split over ep of the dp ranks (default 1)")
    ap.add_argument("--experts", type=int, default=0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--moe-every", type=int, default=1)
    ap.add_argument("--ep-buffers", choices=["worst", "routed"], default="worst",
                    help="a moe layer's received rows under --ep: worst, the trainer's allocation (ep x min(N min(K, E/ep), cap E/ep) "
                         "rows: without a capacity every token of every ep rank could pick this rank's experts); routed, a what-if the "
                         "trainer does not do: sized by the uniform routing's expected N K rows (capacity-bounded) (default worst)")
    ap.add_argument("--capacity-factor", type=float, default=0.0,
                    help="each expert keeps at most ceil(F K N / E) of a call's assignments, 0 = no drops (default 0): the planned all-to-all rows and the moe buffers (the trainer sizes them by the capacity)")
    ap.add_argument("--build", choices=["cuda", "cpu"], default="cuda", help="cuda adds cuBLASLt's workspace (default cuda)")
    ap.add_argument("--cluster", choices=sorted(CLUSTERS), default="h100", help="node preset (default h100)")
    for k in ("gpus_per_node", "mem_gib", "bf16_tflops", "fp8_tflops", "nvlink_gbs", "nvlink_us", "net_gbs", "net_us"):
        ap.add_argument("--" + k.replace("_", "-"), type=float, default=None, help=f"override the preset's {k}")
    ap.add_argument("--efficiency", type=float, default=0.5, help="achieved fraction of peak of the matmuls (default 0.5)")
    ap.add_argument("--json", action="store_true", help="print per rank the keys of the trainer's --report-json")
    ap.add_argument("--search", action="store_true", help="rank the layouts of -np GPUs that fit")
    ap.add_argument("--top", type=int, default=8, help="--search: rows of each list (default 8)")
    ap.add_argument("--plot", default=None, help="--search: draw the best fitting and rejected layouts' memory and step time to this PNG")
    ns = ap.parse_args(argv)
    cl = dict(CLUSTERS[ns.cluster])
    for k in list(cl):
        v = getattr(ns, k)
        if v is not None:
            if v <= 0:
                die(f"--{k.replace('_', '-')}: expected a positive number, found {v}")
            cl[k] = int(v) if k == "gpus_per_node" else v
    for k in ("batch", "seq_len", "np", "tp", "pp", "cp", "vpp", "ep"):
        if getattr(ns, k) < 1:
            die(f"--{k.replace('_', '-')}: expected a positive integer, found {getattr(ns, k)}")
    if ns.capacity_factor < 0:
        die(f"--capacity-factor: expected a number >= 0, found {ns.capacity_factor}")
    if ns.search:
        if not ns.total_batch:
            die("--search: expected --total-batch (the global batch in tokens)")
        fits, rejected = search(ns, cl, ns.cluster)
        if ns.plot:  # the fastest of each (tp, pp, cp, zero), so that the bars compare layouts, not batch sizes
            def distinct(rows, n):
                out, seen = [], set()
                for row in rows:
                    key = row[2].split(" recompute")[0]
                    if key not in seen:
                        seen.add(key)
                        out.append(row)
                return out[:n]
            pick = distinct(fits, 7) + distinct(rejected, 3)
            if not pick:
                die("--plot: no layout to draw")
            draw(ns.plot, [(("" if mem <= cl["mem_gib"] * 2**30 else "(no) ") + d.replace(" recompute", "\nrecompute"), p) for _, mem, d, p in pick],
                 cl, f"{ns.model} on {ns.np} x {ns.cluster}, {ns.total_batch} tokens per step: the fastest layouts that fit, and the fastest that do not")
        return 0
    a = build_args(ns)
    a["json"] = ns.json
    p = plan(a, cl)
    if "error" in p:
        die(p["error"])
    if ns.json:
        print(json.dumps({"world": a["world"], "dp": a["dp"], "tp": a["tp"], "pp": a["pp"], "cp": a["cp"], "bubble": p["bubble"],
                          "step_s": p["step_s"], "ranks": [rank_json(r) for r in p["ranks"]]}))
    else:
        print_plan(p, cl, ns.cluster)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `plan.py | head`: end quietly
    sys.exit(main())
