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

Every memory formula below is the trainer's allocation, term by term, with the file that makes it:
  parameters, gradients  llm/parallel/dp.h dp_init: the packed units (llm/model/units.h: each unit padded to a
                         multiple of 8 x the gradient group's size values), or 1/N of them when ZeRO shards them
  moments, master        llm/ops/optimizer.h: AdamW m and v (FP32), FP32 master weights in 16-bit builds
  activations            llm/model/stage.h stage_init_cp: per slot (the schedule's live micro-batches) and layer,
                         llm/model/block.h's fields the recompute policy keeps, each rounded up to 64 bytes
  comm buffers           llm/parallel/pipeline.h's receive/send buffers; ZeRO-3's unit pool (llm/parallel/bufpool.h)
  workspace              the stage's buffers and recompute buffer, sequence parallelism's gather buffers, the
                         sampler's decode state, the cuBLASLt workspace (CUDA builds)
Usage: scripts/plan.py --help.
"""
import argparse
import functools
import json
import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.environ.get("PIPELINE_SIM", os.path.join(ROOT, "build", "pipeline_sim"))
ZERO_MAX_INFLIGHT = 2  # llm/parallel/zero.h
KINDS = ["params", "grads", "moments", "master", "activations", "comm_buffers", "workspace"]


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------------------------
# the model (llm/model/tensors.h: gpt_config_from_descriptor and the table TENSORS)

def parse_model(s, experts, top_k, moe_every):
    if not (len(s) > 1 and s[0] == "d" and s[1].isdigit()):
        die(f"--model: expected a descriptor dN[,C=..][,NH=..][,maxT=..][,V=..] (the planner reads no checkpoint), found '{s}'")
    head, *rest = s.split(",")
    try:
        L = int(head[1:])
    except ValueError:
        die(f"--model: expected dN with N an integer, found '{head}'")
    gpt2 = {12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}
    C, NH = gpt2.get(L, (64 * L, L))
    cfg = {"L": L, "C": C, "NH": NH, "maxT": 1024, "V": 50257}
    for kv in rest:
        if "=" not in kv:
            die(f"--model: in '{s}' expected key=value after ',', found '{kv}'")
        k, v = kv.split("=", 1)
        if k not in ("C", "NH", "maxT", "V") or not v.isdigit() or int(v) <= 0:
            die(f"--model: in '{s}' expected one of C, NH, maxT, V = a positive integer, found '{kv}'")
        cfg[k] = int(v)
    if cfg["C"] % cfg["NH"]:
        die(f"--model: '{s}': expected C divisible by NH, found C={cfg['C']} NH={cfg['NH']}")
    cfg["Vp"] = (cfg["V"] + 127) // 128 * 128
    cfg["E"], cfg["K"], cfg["M"] = experts, (top_k or (2 if experts else 0)), moe_every
    return cfg


# name, rows, cols, tp split, hold, experts (the table's columns the layout needs)
TENSORS = [
    ("wte", "VP", "C", "vocab", "embed", 0), ("wpe", "MAXT", "C", "rep", "embed", 0),
    ("ln1w", "C", "1", "norm", "layer", 0), ("ln1b", "C", "1", "norm", "layer", 0),
    ("qkvw", "3C", "C", "split", "layer", 0), ("qkvb", "3C", "1", "split", "layer", 0),
    ("attprojw", "C", "C", "split", "layer", 0), ("attprojb", "C", "1", "rep", "layer", 0),
    ("ln2w", "C", "1", "norm", "layer", 0), ("ln2b", "C", "1", "norm", "layer", 0),
    ("fcw", "4C", "C", "split", "dense", 0), ("fcb", "4C", "1", "split", "dense", 0),
    ("fcprojw", "C", "4C", "split", "dense", 0), ("fcprojb", "C", "1", "rep", "dense", 0),
    ("router", "E", "C", "rep", "moe", 0),
    ("efcw", "4C", "C", "rep", "experts", 1), ("efcb", "4C", "1", "rep", "experts", 1),
    ("efcprojw", "C", "4C", "rep", "experts", 1), ("efcprojb", "C", "1", "rep", "experts", 1),
    ("lnfw", "C", "1", "norm", "final", 0), ("lnfb", "C", "1", "norm", "final", 0),
]


def dim(cfg, d):
    return {"1": 1, "C": cfg["C"], "3C": 3 * cfg["C"], "4C": 4 * cfg["C"], "VP": cfg["Vp"], "MAXT": cfg["maxT"], "E": cfg["E"]}[d]


def is_moe(cfg, l):
    return cfg["E"] > 0 and l % cfg["M"] == 0


def unit_kinds(cfg):
    """the units in order (llm/model/tensors.h): embed, each layer (and a moe layer's experts), final; with their layer"""
    u = [("embed", -1)]
    for l in range(cfg["L"]):
        u.append(("moe" if is_moe(cfg, l) else "dense", l))
        if is_moe(cfg, l):
            u.append(("experts", l))
    u.append(("final", -1))
    return u


def unit_values(cfg, kind, tp):
    """values of one unit of this kind on one tp rank (tensor_shard_size; the experts replicated over tp)"""
    holds = {"embed": ("embed",), "dense": ("layer", "dense"), "moe": ("layer", "moe"), "experts": ("experts",), "final": ("final",)}[kind]
    n = 0
    for name, r, c, split, hold, ex in TENSORS:
        if hold not in holds:
            continue
        v = dim(cfg, r) * dim(cfg, c) * (cfg["E"] if ex else 1)
        n += v // tp if split in ("split", "vocab") else v
    return n


def num_parameters(cfg):
    return sum(unit_values(cfg, k, 1) for k, _ in unit_kinds(cfg))


# ---------------------------------------------------------------------------------------------------------------
# the pipeline: the split of the layers (llm/parallel/pipeline_split.h) and the schedule from the simulator

def stage_layers(L, S, s):
    base, extra = L // S, L % S
    l0 = s * base + min(s, extra)
    return l0, l0 + base + (1 if s < extra else 0)


@functools.lru_cache(maxsize=None)
def simulate(schedule, P, m, V, f=None, b=None, w=None, p2p=0.0):
    """the trainer's simulator (build/pipeline_sim --json): bubble, per rank stages, slots, held sends, messages"""
    if not os.path.exists(SIM):
        die(f"{SIM}: not found (expected the trainer's pipeline simulator: make build/pipeline_sim)")
    cmd = [SIM, "--schedule", schedule, "--pp", str(P), "-m", str(m), "--vpp", str(V), "--json", "1", "--p2p", repr(p2p)]
    for flag, v in (("--f", f), ("--b", b), ("--w", w)):
        if v is not None:
            cmd += [flag, repr(v)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"--schedule {schedule} --pp {P} --vpp {V} with m = {m}: {r.stderr.strip() or r.stdout.strip()}")
    return json.loads(r.stdout)


# ---------------------------------------------------------------------------------------------------------------
# memory (bytes), the trainer's allocations

def r64(n):
    return (n + 63) // 64 * 64


def fields_bytes(fields, policy, keep):
    """carve_fields (llm/model/block.h): the fields (count, fp32, kept[none, selective, full]) the policy keeps or not"""
    ix = {"none": 0, "selective": 1, "full": 2}[policy]
    return sum(r64(n * e) for n, e, kept in fields if kept[ix] == keep)


def block_fields(a, B, T):
    """block_act_fields: the 13 fields of one layer and micro-batch, (count, bytes per value, kept by policy)"""
    e, C, tp, cp = a["e"], a["cfg"]["C"], a["tp"], a["cp"]
    BT = B * T
    R = BT // tp if a["sp"] and tp > 1 else BT
    Ca, NH, F = C // tp, a["cfg"]["NH"] // tp, 4 * C // tp
    heads = 4 * B * T * cp * (Ca // cp) if cp > 1 and a["cp_impl"] == "ulysses" else 0  # cp_heads_elems
    return [(R * C, e, (1, 0, 0)), (R, 4, (1, 0, 0)), (R, 4, (1, 0, 0)), (3 * BT * Ca, e, (1, 1, 0)),
            (B * NH * T, 4, (1, 0, 0)), (BT * Ca, e, (1, 0, 0)), (R * C, e, (1, 1, 0)), (R * C, e, (1, 0, 0)),
            (R, 4, (1, 0, 0)), (R, 4, (1, 0, 0)), (BT * F, e, (1, 1, 0)), (BT * F, e, (1, 1, 0)), (heads, e, (1, 0, 0))]


def moe_acts_bytes(cfg, N, e):
    """moe_acts_alloc (llm/model/moe.h): what a moe layer keeps per micro-batch of N tokens, sized for no drops
    (R = N K rows); each field rounded up to 64 bytes"""
    E, K, C = cfg["E"], cfg["K"], cfg["C"]
    NK = N * K
    return sum(r64(b) for b in (N * E * 4, N * 4, NK * 4, NK * 4, NK * 4, NK * 4, (3 * E + 1) * 4, 8,
                                NK * C * e, NK * 4 * C * e, NK * 4 * C * e, NK * C * e))


def moe_buffers_bytes(cfg, N, e):
    """moe_buffers_alloc: what one moe call borrows (workspace), shared by the stage's layers"""
    E, K, C = cfg["E"], cfg["K"], cfg["C"]
    NK = N * K
    return sum(r64(b) for b in (N * E * 4, N * E * 4, NK * 4, NK * 4, NK * 4, E * 4, NK * C * e, NK * 4 * C * e,
                                NK * C * e, 32 * 4 * C * 4))  # MATMUL_DBIAS_MAX_SPLITS = 32


def rank_memory(a, pp_rank, sim):
    """this pp rank's bytes per kind (every dp, tp and cp rank of it alike): live at the end of a run and peak"""
    cfg, e, tp, cp, pp, V = a["cfg"], a["e"], a["tp"], a["cp"], a["pp"], a["V"]
    N = a["dp"] * cp  # the gradient group: dp x cp
    align = 8 * N
    S = pp * V
    stages = sim["ranks"][pp_rank]["stages"] if pp > 1 or V > 1 else [0]
    held = set()
    ranges = []
    for s in stages:
        l0, l1 = stage_layers(cfg["L"], S, s)
        ranges.append((l0, l1, s == 0, s == S - 1))
    units = unit_kinds(cfg)
    sizes = []
    for i, (kind, l) in enumerate(units):
        h = any((l0 <= l < l1) if l >= 0 else ((kind == "embed" and (emb or head)) or (kind == "final" and head))
                for l0, l1, emb, head in ranges)
        if h:
            held.add(i)
        n = unit_values(cfg, kind, tp) if h else 0
        sizes.append((n, (n + align - 1) // align * align))
    packed = sum(p for _, p in sizes)
    shard_params, shard_grads, shard_optim = a["zero"] >= 3, a["zero"] >= 2, a["zero"] >= 1
    state = packed // N if shard_optim else packed
    mem = {k: 0 for k in KINDS}
    mem["params"] = (packed // N if shard_params else packed) * e
    mem["grads"] = (packed // N if shard_grads else packed) * e
    mem["moments"] = 2 * 4 * state
    mem["master"] = 4 * state if e < 4 else 0
    # the stages of the chunks (stage_init_cp with the chunk's slots)
    B, T = a["B"], a["T"] // cp
    BT = B * T
    C, Vl = cfg["C"], cfg["Vp"] // tp
    R = BT // tp if a["sp"] and tp > 1 else BT
    F, Ca = 4 * C // tp, C // tp
    fields = block_fields(a, B, T)
    act = ws = 0
    slots_total = 0
    for c, (l0, l1, emb, head) in enumerate(ranges):
        slots = max(sim["ranks"][pp_rank]["slots"][c], 1) if (pp > 1 or V > 1) else 1
        slots_total += slots
        per_layer = fields_bytes(fields, a["recompute"], 1) + r64(R * C * e)
        rest = [(R * C, e), (head * R * C, e), (head * R, 4), (head * R, 4), (head * BT * Vl, e), (head * BT, 4),
                (emb * BT, 4), (head * BT, 4)]
        act += slots * ((l1 - l0) * per_layer + sum(r64(n * b) for n, b in rest))
        if a["split_w"]:  # block_deferred_carve: the output gradients B keeps for W (stage.h's split_w_bytes)
            dfields = [(3 * BT * Ca, e, (1, 1, 1)), (R * C, e, (1, 1, 1)), (BT * F, e, (1, 1, 1)), (R * C, e, (1, 1, 1)),
                       (R * C, e, (0, 1, 1)), (BT * Ca, e, (0, 1, 1)), (R * C, e, (0, 1, 1)), (BT * F, e, (0, 0, 1))]
            act += slots * (l1 - l0) * fields_bytes(dfields, a["recompute"], 1)
        if a["sp"] and tp > 1:
            ws += 2 * BT * C * e  # the gathered and the full (B*T, C) of the tp group
        if cp > 1:  # cp_alloc (llm/sharded/cp_group.h): one allocation per stage, its parts rounded inside it
            H, Tl, Tf = cfg["NH"] // tp, T, a["T"]
            kv, hs, cc = B * Tl * 2 * Ca, Ca // H, Tf // (2 * cp)
            acc = max(2 * B * H * cc * (hs + 2), B * Tl * Ca)
            if a["cp_impl"] == "ring":
                wb = 2 * kv * e + acc * 4 + 2 * kv * 4 + B * H * Tl * 4
            else:
                wb = 2 * 3 * B * Tl * Ca * e + B * Tf * 4 * (Ca // cp) * e + B * (H // cp) * Tf * 4
            ws += wb + 2 * Tl * C * e + 2 * 4 + 16 * 64
        if cfg["E"] > 0:  # the moe layers' activations per slot and the stage's moe workspace (stage_init_cp)
            act += slots * sum(1 for l in range(l0, l1) if is_moe(cfg, l)) * moe_acts_bytes(cfg, BT, e)
            ws += moe_buffers_bytes(cfg, BT, e)
        ws += fields_bytes(fields, a["recompute"], 0)  # the recompute buffer: the fields not kept, once per stage
        scratch = max(BT * C, 1024 * 4 * C)
        vp = (tp + 1) * 3 * BT if tp > 1 else 0
        bufs = [(BT * C, e), (R * C if a["recompute"] == "full" else 0, e), (BT * C, e), (BT * F, e), (3 * BT * Ca, e),
                (head * vp, 4), (scratch, 4), (R * C, e), (2, 4)]
        ws += sum(r64(n * b) for n, b in bufs)
    # the sampler's decode state (llm/model/sampler.h), made whether or not samples are drawn
    nheld = sum(l1 - l0 for l0, l1, _, _ in ranges)
    dec = [(nheld * cfg["maxT"] * Ca, e), (nheld * cfg["maxT"] * Ca, e), (C, e), (Vl, e), (cfg["Vp"] if tp > 1 else 0, e), (1, 4),
           (C, e), (1, 4), (1, 4), (3 * Ca, e), (Ca, e), (C, e), (C, e), (F, e), (F, e), (cfg["NH"] // tp * cfg["maxT"], 4)]
    ws += sum(r64(n * b) for n, b in dec)
    if cfg["E"] > 0:  # the sampler's one token through a moe layer (its acts tagged activations), the pipeline's counts
        act += moe_acts_bytes(cfg, 1, e)
        ws += moe_buffers_bytes(cfg, 1, e) + cfg["L"] * 2 * cfg["E"] * 4
    ws += 8 + 4 + 8  # dp's scalars, AdamW's norm, the pipeline's loss scalar
    if a["build"] == "cuda":
        ws += 32 * 1024 * 1024 + 1024 * 4  # cuBLASLt workspace (MATMUL_LT_WORKSPACE_BYTES) and the norm's partials
    mem["activations"] = act
    mem["workspace"] = ws
    # communication buffers: the pipeline's activation receive, gradient receive and held gradient sends
    msg = R * C * e
    num_send = sim["ranks"][pp_rank]["num_send"] if (pp > 1 or V > 1) else 0
    comm = 2 * msg + max(num_send, 1) * msg
    peak_extra = {k: 0 for k in KINDS}
    if shard_grads:  # ZeRO-2/3's unit pool (llm/parallel/zero.h, bufpool.h): trimmed after each step to its keep
        # (the steady working set); its peak depends on when MPI finishes each reduction, so it is not exact:
        # modelled as the keep plus one more layer unit (docs/plan.md shows the error)
        largest = max(p for _, p in sizes)
        layer = max([p for (kind, _), (_, p) in zip(units, sizes) if kind not in ("embed", "final")] or [0])
        keep = largest + (ZERO_MAX_INFLIGHT + 1) * layer + ((largest + 2 * layer) if shard_params else 0)
        comm += keep * e
        peak_extra["comm_buffers"] = layer * e
    mem["comm_buffers"] = comm
    if pp > 1 and not sim.get("vshape", 0) and pp_rank in (0, pp - 1):  # dp_tied_embedding_diff: mine and the partner's
        peak_extra["comm_buffers"] = max(peak_extra["comm_buffers"], 2 * sizes[0][1] * e)
    peak = dict(mem)
    for k in KINDS:
        peak[k] += peak_extra[k]
    return {"mem": mem, "peak": peak, "packed": packed, "shard_parameters": sum(n for n, _ in sizes), "held": held,
            "sizes": sizes, "slots": slots_total, "ranges": ranges}


# ---------------------------------------------------------------------------------------------------------------
# the ledger (llm/comm/comm_ledger.h): rows (kind, group) -> calls, payload bytes, sent bytes (ring model)

def ring_sent(kind, N, S, root):
    if N <= 1:
        return 0.0
    return {"all_reduce": 2.0 * (N - 1) / N * S, "reduce_scatter": (N - 1) / N * S, "all_gather": (N - 1) / N * S,
            "all_to_all": (N - 1) / N * S, "broadcast": S if root else 0.0, "send": S}.get(kind, 0.0)


class Ledger:
    def __init__(self, sizes):
        self.rows, self.sizes = {}, sizes

    def add(self, kind, group, payload, calls=1, root=0):
        r = self.rows.setdefault((kind, group), [0, 0.0, 0.0])
        r[0] += calls
        r[1] += payload * calls
        r[2] += ring_sent(kind, self.sizes[group], payload, root) * calls

    def json(self, rank):
        order = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send", "recv"]
        gorder = ["world", "dp", "tp", "pp", "embed", "cp"]
        rows = [{"kind": k, "group": g, "size": self.sizes[g], "calls": v[0], "payload_bytes": round(v[1]), "sent_bytes": round(v[2], 1)}
                for (k, g), v in sorted(self.rows.items(), key=lambda kv: (order.index(kv[0][0]), gorder.index(kv[0][1])))]
        return {"rank": rank, "rows": rows, "total_calls": sum(r["calls"] for r in rows),
                "total_payload_bytes": sum(r["payload_bytes"] for r in rows), "total_sent_bytes": round(sum(v[2] for v in self.rows.values()), 1)}


def norm_owned(a, rm, grad_rank):
    """the values of the LayerNorm tensors (TP_NORM) among the positions of the held units this rank owns: all of
    them without ZeRO, its block of each unit with (dp_next_piece)"""
    cfg, tp, N = a["cfg"], a["tp"], a["dp"] * a["cp"]
    total = 0
    for u in sorted(rm["held"]):
        kind = unit_kinds(cfg)[u][0]
        n, padded = rm["sizes"][u]
        lo, hi = (0, n) if a["zero"] == 0 else (grad_rank * (padded // N), min((grad_rank + 1) * (padded // N), n))
        holds = {"embed": ("embed",), "dense": ("layer", "dense"), "moe": ("layer", "moe"), "experts": ("experts",), "final": ("final",)}[kind]
        at = 0
        for name, r, c, split, hold, ex in TENSORS:
            if hold not in holds:
                continue
            v = dim(cfg, r) * dim(cfg, c) * (cfg["E"] if ex else 1)
            v = v // tp if split in ("split", "vocab") else v
            if split == "norm":
                total += max(0, min(hi, at + v) - max(lo, at))
            at += v
    return total


def rank_ledger(a, coords, rm, sim):
    """the collectives of one step of this rank (dp, pp; tp and cp where modelled, see docs/plan.md)"""
    dp_rank, pp_rank, cp_rank, tp_rank = coords
    e, pp, tp, cp = a["e"], a["pp"], a["tp"], a["cp"]
    N = a["dp"] * cp
    ends = pp > 1 and pp_rank in (0, pp - 1)
    sizes = {"world": a["world"], "dp": N, "tp": tp, "pp": pp, "embed": 2 if ends else 1, "cp": cp}
    led = Ledger(sizes)
    m = a["m"]
    held = [rm["sizes"][u][1] for u in sorted(rm["held"])]
    # data parallelism (llm/parallel/ddp.h, zero.h): per unit of this stage, in its last micro-batch
    if a["zero"] == 0:
        for p in held:
            led.add("all_reduce", "dp", p * e)
        if N > 1:
            led.add("all_reduce", "dp", 4)  # the loss
    else:
        for p in held:
            led.add("reduce_scatter", "dp", p * e)
            led.add("all_gather", "dp", p * e, calls=1 if a["zero"] < 3 else 2 * m)
        if a["zero"] == 3 and sim.get("vshape", 0) and pp_rank == 0:  # the V's rank 0 gathers the embedding for both ends
            led.add("all_gather", "dp", rm["sizes"][0][1] * e, calls=2 * m)
        led.add("all_reduce", "dp", 4, calls=2 if N > 1 else 1)  # the squared norm, and the loss over N > 1
    # tensor parallelism (llm/model/linear.h, llm/sharded/tensor_parallel.h), per micro-batch of each chunk: without
    # sequence parallelism Megatron's g (row-parallel outputs) and f's backward (column-parallel input gradients),
    # an all-reduce of (B*T, C) each, 4 per layer; with it an all-gather before each column-parallel linear and
    # again in its backward (the gathered input is not kept), a reduce-scatter after each row-parallel one and of
    # each column-parallel input gradient, an all-gather of each row-parallel output gradient: 6 + 4 per layer.
    # Full recompute runs the forward's again. The embedding sums its vocabulary parts (all-reduce, or a
    # reduce-scatter and its backward's all-gather); the LM head gathers its input (sp) and the cross-entropy's
    # row states (3 floats per token per rank), and its input gradient is summed like a column-parallel layer's.
    if tp > 1:
        BT = a["B"] * (a["T"] // cp)
        act = BT * a["cfg"]["C"] * e
        rerun = 1 if a["recompute"] == "full" else 0
        for l0, l1, emb, head in rm["ranges"]:
            # a moe layer has no tp-split MLP (its experts are replicated over tp): the attention's half only
            nl = sum(1 if is_moe(a["cfg"], l) else 2 for l in range(l0, l1)) * m / 2
            if a["sp"]:
                led.add("all_gather", "tp", act, calls=round(nl * (6 + 2 * rerun)) + m * (emb + 2 * head))
                led.add("reduce_scatter", "tp", act, calls=round(nl * (4 + 2 * rerun)) + m * (emb + head))
            else:
                led.add("all_reduce", "tp", act, calls=round(nl * (4 + 2 * rerun)) + m * (emb + head))
            if head:
                led.add("all_gather", "tp", tp * 3 * BT * 4, calls=m)
        if a["sp"]:  # the LayerNorms' gradients, partial sums over the rank's tokens (llm/parallel/dp_step.h)
            led.add("all_reduce", "tp", norm_owned(a, rm, coords[0] * cp + coords[2]) * e)
        led.add("all_reduce", "tp", 4)  # the squared norm
    # context parallelism (llm/sharded/ring_attention.h, ulysses_attention.h), per layer and micro-batch: the ring
    # passes K/V blocks (B, T/cp, 2 C/tp) N-1 times in the forward, and in the backward N-1 K/V blocks and N-1
    # FP32 dK/dV accumulators (an exchange: a send and a receive each); Ulysses all-to-alls q, k, v to a head split
    # and the output back (and the reverse in the backward). Recompute (selective: the attention core; full) runs
    # the forward's again. The loss: one all-reduce of two floats per step on the head's ranks.
    if cp > 1:
        Tl = a["T"] // cp
        Ca = a["cfg"]["C"] // tp
        att = 1 + (1 if a["recompute"] != "none" else 0)
        nl = sum(l1 - l0 for l0, l1, _, _ in rm["ranges"]) * m
        if a["cp_impl"] == "ring":
            kv = a["B"] * Tl * 2 * Ca
            for kind in ("send", "recv"):
                led.add(kind, "cp", kv * e, calls=nl * (cp - 1) * (att + 1))
                led.add(kind, "cp", kv * 4, calls=nl * (cp - 1))
        else:
            w = Ca // cp
            for n3 in (3 * w, w):
                led.add("all_to_all", "cp", cp * a["B"] * Tl * n3 * e, calls=nl * (att + 1))
        if any(head for _, _, _, head in rm["ranges"]):
            led.add("all_reduce", "cp", 8)
    # a moe model's routed and dropped counts per layer and expert summed over dp and pp, its aux and z losses over pp
    # (train_gpt.cu, once per step)
    if a["cfg"]["E"] > 0:
        n = a["cfg"]["L"] * 2 * a["cfg"]["E"] * 4
        if N > 1:
            led.add("all_reduce", "dp", n)
            led.add("all_reduce", "dp", 4, calls=2)  # the aux and z losses' means (dp_mean)
        if pp > 1:
            led.add("all_reduce", "pp", n)
            led.add("all_reduce", "pp", 8)
    # the pipeline: P2P messages of the plan, the tied embedding's gradient, the loss and the norm over pp
    if pp > 1:
        R = a["B"] * (a["T"] // cp)
        R = R // tp if a["sp"] and tp > 1 else R
        msg = R * a["cfg"]["C"] * e
        me = sim["ranks"][pp_rank]
        led.add("send", "pp", msg, calls=me["send_F"] + me["send_B"])
        led.add("recv", "pp", msg, calls=me["recv_F"] + me["recv_B"])
        led.add("all_reduce", "pp", 4)
        head_rank = 0 if sim.get("vshape", 0) else pp - 1
        led.add("broadcast", "pp", 4, root=pp_rank == head_rank)
        if ends and not sim.get("vshape", 0):  # the V holds both copies on rank 0: summed in place, nothing sent
            n, padded = rm["sizes"][0]  # dp_owned: the unit less its pad, or this rank's block of it (ZeRO)
            g = coords[0] * cp + coords[2]
            own = n if a["zero"] == 0 else max(0, min((g + 1) * (padded // N), n) - g * (padded // N))
            led.add("all_reduce", "embed", own * e)
    return led


# ---------------------------------------------------------------------------------------------------------------
# the cluster and the time model

CLUSTERS = {
    # gpus per node, GiB per GPU, dense BF16 and FP8 TFLOP/s, NVLink GB/s per GPU (one direction) and latency us,
    # inter-node GB/s per GPU and latency us (NVIDIA data sheets; 8 x 400 Gb/s InfiniBand NICs per node; the A100
    # 80 GB node of 2021-22 with 8 x 200 Gb/s HDR, no FP8)
    "a100": dict(gpus_per_node=8, mem_gib=80, bf16_tflops=312, fp8_tflops=312, nvlink_gbs=300, nvlink_us=3, net_gbs=25, net_us=10),
    "h100": dict(gpus_per_node=8, mem_gib=80, bf16_tflops=989, fp8_tflops=1979, nvlink_gbs=450, nvlink_us=3, net_gbs=50, net_us=10),
    "h200": dict(gpus_per_node=8, mem_gib=141, bf16_tflops=989, fp8_tflops=1979, nvlink_gbs=450, nvlink_us=3, net_gbs=50, net_us=10),
    "b200": dict(gpus_per_node=8, mem_gib=180, bf16_tflops=2250, fp8_tflops=4500, nvlink_gbs=900, nvlink_us=3, net_gbs=50, net_us=10),
    # this machine: 2 cores; peak = OpenBLAS SGEMM measured by the trainer at start-up (llm/train/mfu.h) is about
    # this order; "links" are shared memory through Open MPI
    "cpu": dict(gpus_per_node=64, mem_gib=8, bf16_tflops=0.05, fp8_tflops=0.05, nvlink_gbs=2, nvlink_us=5, net_gbs=1, net_us=20),
}


def step_flops(cfg, tokens):
    """model FLOPs of one step (Narayanan et al. 2021 eq. 3 for GPT: 72 B s l h^2 (1 + s/6h + V/12lh), written as
    6 N tokens for the matmuls plus the attention's 12 L T C per token), without recompute"""
    L, C, T = cfg["L"], cfg["C"], cfg["T"]
    dense = 6 * (num_parameters_active(cfg) - cfg["maxT"] * C) * tokens
    attn = 12 * L * T * C * tokens / 2 * 2  # QK^T and AV, forward and backward (6 x 2 L T C), causal mask not credited
    return dense + attn


def num_parameters_active(cfg):
    """parameters a token passes through: the experts' K of E"""
    if cfg["E"] == 0:
        return num_parameters(cfg)
    n = 0
    for kind, _ in unit_kinds(cfg):
        v = unit_values(cfg, kind, 1)
        n += v * cfg["K"] // cfg["E"] if kind == "experts" else v
    return n


def group_tier(a, group, cl):
    """the link tier a group's ring crosses: the ranks of one group of this kind, by the mesh's rank order"""
    strides = {"tp": 1, "cp": a["tp"], "pp": a["tp"] * a["cp"], "dp": a["tp"] * a["cp"] * a["pp"]}
    if group == "dp":  # dp x cp: its members span cp and dp
        span = (a["dp"] - 1) * strides["dp"] + (a["cp"] - 1) * strides["cp"] + 1
    elif group == "embed":
        span = (a["pp"] - 1) * strides["pp"] + 1
    else:
        span = (a[group] - 1) * strides[group] + 1
    return "nvlink" if span <= cl["gpus_per_node"] else "network"


def comm_time(kind, N, sent, calls, tier, cl):
    """ring model (the ledger's bytes): time = bytes sent / link bandwidth + steps x latency; a ring all-reduce has
    2 (N-1) steps per call, reduce-scatter and all-gather N-1, a P2P send 1"""
    if N <= 1 or calls == 0:
        return 0.0
    bw = (cl["nvlink_gbs"] if tier == "nvlink" else cl["net_gbs"]) * 1e9
    lat = (cl["nvlink_us"] if tier == "nvlink" else cl["net_us"]) * 1e-6
    steps = {"all_reduce": 2 * (N - 1), "reduce_scatter": N - 1, "all_gather": N - 1, "all_to_all": N - 1}.get(kind, 1)
    return sent / bw + calls * steps * lat


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
        dp_rank = r // (a["tp"] * a["cp"] * a["pp"])
        rm = dict(per_pp[pp_rank])
        led = rank_ledger(a, (dp_rank, pp_rank, cp_rank, tp_rank), rm, sim)
        if a["sp"] and a["tp"] > 1:  # dp_reduce_norm_grads_tp's buffer, for the call, freed after it
            rm["peak"] = dict(rm["peak"])
            nb = norm_owned(a, rm, dp_rank * a["cp"] + cp_rank) * a["e"]
            rm["peak"]["comm_buffers"] = max(rm["peak"]["comm_buffers"], rm["mem"]["comm_buffers"] + nb)
        ranks.append({"rank": r, "dp_rank": dp_rank, "tp_rank": tp_rank, "pp_rank": pp_rank, "cp_rank": cp_rank,
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
    # the simulator's plan (its latency here zero), counted in the bubble
    for (kind, group), (calls, payload, sent) in worst["led"].rows.items():
        tier = group_tier(a, group, cl)
        t = comm_time(kind, worst["led"].sizes[group], sent, calls, tier, cl)
        key = (group, tier)
        comm[key] = comm.get(key, 0.0) + t
        if group == "dp" and payload / max(calls, 1) > 64 and kind in ("all_reduce", "reduce_scatter"):
            x = max(t - 2.0 / 3.0 * compute / m, t / nunits)
        elif group == "dp" and kind == "all_gather" and a["zero"] == 3:
            x = max(t - compute, t / (2 * m * nunits))
        elif group in ("pp",) and kind in ("send", "recv"):
            x = 0.0
        else:
            x = t
        exposed[key] = exposed.get(key, 0.0) + x
    busy = compute + sum(v for (g, _), v in exposed.items() if g in ("tp", "cp"))
    step = busy / (1 - bubble) + sum(v for (g, _), v in exposed.items() if g not in ("tp", "cp"))
    mfu = flops / a["world"] / step / (cl["bf16_tflops"] * 1e12) if step > 0 else 0.0
    return {"a": a, "sim": sim, "ranks": ranks, "flops": flops, "compute_s": compute, "comm_s": comm, "exposed_s": exposed,
            "bubble": bubble, "bubble_s": busy / (1 - bubble) - busy, "step_s": step, "tokens_per_s": tokens / step if step else 0,
            "mfu": mfu, "mem_gib": max(sum(x["rm"]["peak"].values()) for x in ranks) / 2**30}


def rank_json(r):
    out = {k: r[k] for k in ("rank", "dp_rank", "tp_rank", "pp_rank", "cp_rank", "shard_parameters", "packed_parameters")}
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
            "cp_impl": ns.cp_impl, "schedule": ns.schedule, "V": ns.vpp, "zero": ns.zero, "recompute": ns.recompute,
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
                for zero in (0, 1, 2, 3):
                    if dp == 1 and zero:
                        continue
                    for rc in ("none", "selective", "full"):
                        for B in (1, 2, 4):
                            ns2 = argparse.Namespace(**vars(ns))
                            ns2.tp, ns2.pp, ns2.cp, ns2.dp, ns2.zero, ns2.recompute, ns2.batch = tp, pp, cp, dp, zero, rc, B
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
                            desc = f"dp {dp} tp {tp} pp {pp} cp {cp} zero {zero} recompute {rc} -b {B} (m {a['m']})"
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


def draw(path, rows, cl, title):
    """the picture: per layout, the memory per GPU of its fullest rank as stacked bars of the kinds against the GPU's
    memory line, and beside it the step time split into compute, exposed communication per group and tier, and
    the bubble. rows: (label, plan) pairs."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("--plot: expected matplotlib (pip install matplotlib), found none")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 0.55 * len(rows) + 2.8), sharey=True)
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3"]
    labels = [lab for lab, _ in rows]
    for i, (_, p) in enumerate(rows):
        worst = max(p["ranks"], key=lambda r: sum(r["rm"]["peak"].values()))["rm"]["peak"]
        left = 0.0
        for k, c in zip(KINDS, colors):
            v = worst[k] / 2**30
            ax.barh(i, v, left=left, color=c, label=k if i == 0 else None)
            left += v
        if left > 2.5 * cl["mem_gib"]:  # off the axis: its total written at the edge
            ax.text(2.5 * cl["mem_gib"], i, f" {left:.0f} GiB \u2192", va="center", ha="right", fontsize=8, color="white")
        parts = [("compute", p["compute_s"], "#4c72b0")]
        for (g, t), v in sorted(p["exposed_s"].items()):
            if v > 0:
                parts.append((f"{g} ({t})", v, {"dp": "#dd8452", "tp": "#55a868", "cp": "#8172b3", "pp": "#937860"}.get(g, "#999999")))
        parts.append(("bubble", p["bubble_s"], "#c44e52"))
        left = 0.0
        for name, v, c in parts:
            bx.barh(i, v, left=left, color=c, label=name, hatch="//" if "network" in name else None)
            left += v
    ax.set_xlim(0, 2.5 * cl["mem_gib"])
    ax.axvline(cl["mem_gib"], color="black", linestyle="--", label=f"GPU memory {cl['mem_gib']:g} GiB")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("memory per GPU, the fullest rank (GiB)")
    ax.legend(fontsize=7, loc="upper right")
    h, lab = bx.get_legend_handles_labels()
    seen = {}
    for hh, ll in zip(h, lab):
        seen.setdefault(ll, hh)
    bx.legend(seen.values(), seen.keys(), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=5)
    bx.set_xlabel("predicted step time (s): compute, exposed communication (hatched: inter-node), bubble")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


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
    ap.add_argument("--ep", type=int, default=1, help="expert parallelism: the trainer has none yet, so only 1")
    ap.add_argument("--experts", type=int, default=0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--moe-every", type=int, default=1)
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
    for k in ("batch", "seq_len", "np", "tp", "pp", "cp", "vpp"):
        if getattr(ns, k) < 1:
            die(f"--{k.replace('_', '-')}: expected a positive integer, found {getattr(ns, k)}")
    if ns.ep != 1:
        die(f"--ep {ns.ep}: expected 1 (the trainer has no expert parallelism yet; its experts are replicated over dp and tp)")
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
