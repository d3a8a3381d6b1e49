#!/usr/bin/env python3
"""plan_memory.py: the bytes each kind of the trainer's tagged allocator (llm/core/context.h) holds on one pp rank,
allocation by allocation, with the file that makes each (scripts/plan.py's docstring lists them); live at the end
of a run and peak, as --report-json writes them."""
import math
import struct

from plan_layout import KINDS, is_moe, stage_layers, unit_kinds, unit_values

ZERO_MAX_INFLIGHT = 2  # llm/parallel/zero.h


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


def moe_capacity(capf, N, E, K):
    """moe_capacity (llm/ops/moe_router.cuh): each expert keeps at most ceil(F K N / E) of a call's assignments"""
    if capf <= 0:
        return N * K
    f32 = struct.unpack("f", struct.pack("f", capf))[0]  # the flag is a C float, widened to double
    return min(math.ceil(f32 * K * N / E), N * K)


def moe_rows(cfg, N, ep, capf, routed=False, G=1):
    """(R, Rl): the rows of this rank's permuted copies (moe_max_rows: N K, or E x capacity when smaller) and the
    rows its local experts can receive (moe_max_local_rows, ep_local_rows: each of the ep ranks sends at most
    N min(K, E/ep) copies, and at most capacity x E/ep; without expert parallelism R itself). routed: the what-if
    of buffers sized by the uniform routing's expected rows, R received as R sent (not the trainer's allocation)"""
    E, K = cfg["E"], cfg["K"]
    cap = moe_capacity(capf, N * G, E, K)  # the whole micro-batch's (G ranks: moe_call_capacity)
    R = min(E * cap, N * K)
    if ep == 1 or routed:
        return R, R
    El = E // ep
    return R, min(N * min(K, El), cap * El) * ep


def moe_acts_bytes(cfg, N, e, ep=1, capf=0.0, routed=False, G=1):
    """moe_acts_alloc (llm/model/moe.h): what a moe layer keeps per micro-batch of N tokens: the routing, the permuted
    rows xp and yp (R rows), the local experts' fc outputs (Rl rows) and, with expert parallelism, their own input
    and output rows xl, yl (Rl; without it they are xp and yp); each field rounded up to 64 bytes"""
    E, K, C = cfg["E"], cfg["K"], cfg["C"]
    NK = N * K
    R, Rl = moe_rows(cfg, N, ep, capf, routed, G)
    own = Rl if ep > 1 else 0
    return sum(r64(b) for b in (N * E * 4, N * 4, NK * 4, NK * 4, NK * 4, NK * 4, (3 * E + 1) * 4, 8, E * 4,
                                R * C * e, Rl * 4 * C * e, Rl * 4 * C * e, R * C * e, own * C * e, own * C * e))


def moe_buffers_bytes(cfg, N, e, ep=1, capf=0.0, routed=False, G=1):
    """moe_buffers_alloc: what one moe call borrows (workspace), shared by the stage's layers; with expert
    parallelism the local experts' dyl and dxl rows and the all-to-alls' rank-major scratch rm (Rl rows each);
    G > 1: the N tokens are one rank's of a micro-batch split over G ranks (cp, tp with sp, or both:
    llm/sharded/moe_sequence.h), and the whole micro-batch's routing of A = G N tokens has its buffers too"""
    E, K, C = cfg["E"], cfg["K"], cfg["C"]
    NK = N * K
    R, Rl = moe_rows(cfg, N, ep, capf, routed, G)
    own = Rl if ep > 1 else 0
    mine = sum(r64(b) for b in (N * E * 4, N * E * 4, NK * 4, NK * 4, NK * 4, E * 4, R * C * e, Rl * 4 * C * e,
                                R * C * e, 32 * 4 * C * 4, own * C * e, own * C * e, own * C * e))  # MATMUL_DBIAS_MAX_SPLITS = 32
    if G == 1:
        return mine
    A = G * N
    AK = A * K
    whole = sum(r64(b) for b in (A * E * 4, A * E * 4, A * E * 4, A * 4, AK * 4, AK * 4, AK * 4, AK * 4,
                                 (3 * E + 1) * 4, 8, AK * 4, AK * 4, E * 4))
    return mine + whole + A * 4  # (and the group's map of the A tokens, moe_seq_init: its own allocation)


def moe_seq_size(a):
    """the ranks a micro-batch's tokens are split over for the moe layers' routing: cp x (tp with sp), 1 for none"""
    return a["cp"] * (a["tp"] if a["sp"] and a["tp"] > 1 else 1)


def fp8_align256(n):
    return (n + 255) // 256 * 256


def fp8_matrix_bytes(rows, K, scaling):
    """fp8_matrix_bytes (llm/precision/fp8_matrix.cuh): the codes, the scales, MX's E8M0 exponents and the scales in
    cuBLASLt's layout, each on a 256-byte boundary"""
    cdiv = lambda x, y: (x + y - 1) // y  # noqa: E731
    up = lambda x, y: cdiv(x, y) * y  # noqa: E731
    ns = {"tensor": 1, "1x128": rows * cdiv(K, 128), "128x128": cdiv(rows, 128) * cdiv(K, 128)}.get(scaling, 1)
    ne = rows * cdiv(K, 32) if scaling == "mx" else 1
    lt = {"tensor": 4, "1x128": cdiv(K, 128) * up(rows, 4) * 4, "128x128": cdiv(rows, 128) * up(cdiv(K, 128), 4) * 4,
          "mx": up(rows, 128) * up(cdiv(K, 32), 4)}[scaling]
    return fp8_align256(rows * K) + fp8_align256(ns * 4) + fp8_align256(ne) + fp8_align256(lt)


def fp8_workspace(a, BT):
    """--fp8 (llm/precision/fp8_linear.h): the amax and scale tables of every layer's 4 linears x 3 tensors, and the two
    quantized operands, grown (freed, then made anew) to the largest GEMM operand of the block's linears: forward
    x (BT, in) and w (out, in), dgrad dy (BT, out) and w^T (in, out), wgrad dy^T (out, BT) and x^T (in, BT)"""
    r, C, tp = a["fp8"], a["cfg"]["C"], a["tp"]
    sc = {"x": "tensor", "w": "tensor", "dy": "tensor"}
    if r == "block":
        sc = {"x": "1x128", "w": "128x128", "dy": "1x128"}
    elif r == "mx":
        sc = {"x": "mx", "w": "mx", "dy": "mx"}
    n = a["cfg"]["L"] * 4 * 3
    capa = capb = fp8_matrix_bytes(0, 0, "tensor")  # made empty at fp8_init
    for i, o in ((C, 3 * C // tp), (C // tp, C), (C, 4 * C // tp), (4 * C // tp, C)):  # qkv, attproj, fc, fcproj
        capa = max(capa, fp8_matrix_bytes(BT, i, sc["x"]), fp8_matrix_bytes(BT, o, sc["dy"]), fp8_matrix_bytes(o, BT, sc["dy"]))
        capb = max(capb, fp8_matrix_bytes(o, i, sc["w"]), fp8_matrix_bytes(i, o, sc["w"]), fp8_matrix_bytes(i, BT, sc["x"]))
    return (n + 2) * 4 + n * 4 + capa + capb


def zero2_pool(units, sizes, held, rng, keep, steps=4):
    """ZeRO-2's gradient working buffers through the pool (bufpool.h), played for a few steps: with gradient
    accumulation (m >= 2) every held unit asks for its buffer in the first micro-batch's backward, in the order of
    zero_init's backward list (the head's embedding and final LayerNorm, the layers from the last, the encoder's
    embedding), before any reduction starts, so the order and the sizes are fixed: pool_get takes the smallest free
    buffer that fits or makes one of the unit's size; after the step every buffer is free and pool_trim keeps the
    largest that fit in `keep` values. Returns (values held after the last step, the most held at once)."""
    l0, l1, emb, head = rng
    order = []
    encoder = emb and any(kind in ("dense", "moe") and l == l0 == 0 for kind, l in units)
    if head:
        order += [0, len(units) - 1]
    for u in reversed(range(len(units))):  # the layers from the last, a moe layer's unit before its experts unit
        kind, l = units[u]
        if kind in ("dense", "moe") and u in held:
            order.append(u)
            if kind == "moe" and u + 1 in held:
                order.append(u + 1)
    if encoder and not head:
        order.append(0)
    pool, peak = [], 0  # [cap, in_use]
    for _ in range(steps):
        for u in order:
            n = sizes[u][1]
            free = [b for b in pool if not b[1] and b[0] >= n]
            if free:
                min(free, key=lambda b: b[0])[1] = 1
            else:
                pool.append([n, 1])
            peak = max(peak, sum(b[0] for b in pool))
        kept, out = 0, []
        for b in sorted(pool, key=lambda b: -b[0]):  # every buffer free after the step: pool_trim
            if kept + b[0] <= keep:
                kept += b[0]
                out.append([b[0], 0])
        pool = out
    return sum(b[0] for b in pool), peak


def rank_memory(a, pp_rank, sim):
    """this pp rank's bytes per kind (every dp, tp and cp rank of it alike): live at the end of a run and peak"""
    cfg, e, tp, cp, pp, V = a["cfg"], a["e"], a["tp"], a["cp"], a["pp"], a["V"]
    N = a["dp"] * cp  # the gradient group: dp x cp
    ep = a.get("ep", 1)
    what_if = (a["capf"], True) if a.get("ep_buffers") == "routed" else (a["capf"], False)  # (the trainer: by the capacity, stage_set_moe)
    align = 8 * N  # every unit, an experts unit too (dp_init: ZERO_ALIGN x the gradient group)
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
        n = unit_values(cfg, kind, tp, ep) if h else 0
        sizes.append((n, (n + align - 1) // align * align))
    packed = sum(p for _, p in sizes)
    # ZeRO's shard (zero_init): each unit's block, padded / the unit's group: an experts unit split by expert
    # parallelism over the ranks that hold the same experts (edp x cp: N / ep), every other unit over N
    groups = [N // ep if ep > 1 and kind == "experts" else N for kind, _ in units]
    shard = sum(p // g for (_, p), g in zip(sizes, groups))
    shard_params, shard_grads, shard_optim = a["zero"] >= 3, a["zero"] >= 2, a["zero"] >= 1
    state = shard if shard_optim else packed
    mem = {k: 0 for k in KINDS}
    mem["params"] = (shard if shard_params else packed) * e
    mem["grads"] = (shard if shard_grads else packed) * e
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
        # a moe layer has no dense MLP: its fch and fch_gelu fields are not allocated (block_act_fields' Fd)
        mfields = [(0, b, k) if i in (10, 11) else (n, b, k) for i, (n, b, k) in enumerate(fields)]
        n_moe = sum(1 for l in range(l0, l1) if is_moe(cfg, l))
        per_layer = fields_bytes(fields, a["recompute"], 1) + r64(R * C * e)
        per_moe = fields_bytes(mfields, a["recompute"], 1) + r64(R * C * e)
        rest = [(R * C, e), (head * R * C, e), (head * R, 4), (head * R, 4), (head * BT * Vl, e), (head * BT, 4),
                (emb * BT, 4), (head * BT, 4)]
        act += slots * ((l1 - l0 - n_moe) * per_layer + n_moe * per_moe + sum(r64(n * b) for n, b in rest))
        if a["split_w"]:  # block_deferred_carve: the output gradients B keeps for W (stage.h's split_w_bytes)
            dfields = [(3 * BT * Ca, e, (1, 1, 1)), (R * C, e, (1, 1, 1)), (BT * F, e, (1, 1, 1)), (R * C, e, (1, 1, 1)),
                       (R * C, e, (0, 1, 1)), (BT * Ca, e, (0, 1, 1)), (R * C, e, (0, 1, 1)), (BT * F, e, (0, 0, 1))]
            # a moe layer: no fc/fcproj output gradients or inputs (dfch, dfcproj, ln2, fch_gelu: count 0)
            dmoe = [(0, b, k) if i in (2, 3, 6, 7) else (n, b, k) for i, (n, b, k) in enumerate(dfields)]
            act += slots * ((l1 - l0 - n_moe) * fields_bytes(dfields, a["recompute"], 1) + n_moe * fields_bytes(dmoe, a["recompute"], 1))
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
        if cfg["E"] > 0:  # the moe layers' activations per slot and the stage's moe workspace (stage_set_moe)
            # (sized by --capacity-factor's bound, no drops without one; --ep-buffers routed: the what-if); on the
            # rank's R tokens (sequence parallelism: BT / tp), the whole micro-batch's routing with cp or sp
            G = moe_seq_size(a)
            act += slots * sum(1 for l in range(l0, l1) if is_moe(cfg, l)) * moe_acts_bytes(cfg, R, e, ep, *what_if, G)
            ws += moe_buffers_bytes(cfg, R, e, ep, *what_if, G)
            if ep > 1:  # ep_init (llm/sharded/expert_parallel.h): the counts sent and received, 2 E floats (its own
                ws += 2 * cfg["E"] * 4  # device_malloc, not rounded)
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
        act += moe_acts_bytes(cfg, 1, e, ep, *what_if)
        ws += moe_buffers_bytes(cfg, 1, e, ep, *what_if) + cfg["L"] * 2 * cfg["E"] * 4
        ws += cfg["L"] * cfg["E"] * 4  # the selection bias (llm/train/moe_balance.h), on the device whatever --expert-bias-rate
    if a["fp8"] != "none":  # (the CPU build's FP8 GEMM; a CUDA build adds an FP32 scratch whose size depends on the
        ws += fp8_workspace(a, BT)  # cuBLASLt path taken at run time: not counted)
    ws += 12 + 4 + 8  # dp's three scalars, AdamW's norm, the pipeline's loss scalar
    if a["build"] == "cuda":
        ws += 32 * 1024 * 1024 + 1024 * 4  # cuBLASLt workspace (MATMUL_LT_WORKSPACE_BYTES) and the norm's partials
    mem["activations"] = act
    mem["workspace"] = ws
    # communication buffers: the pipeline's activation receive, gradient receive and held gradient sends
    msg = R * C * e
    num_send = sim["ranks"][pp_rank]["num_send"] if (pp > 1 or V > 1) else 0
    comm = 2 * msg + max(num_send, 1) * msg
    peak_extra = {k: 0 for k in KINDS}
    if shard_grads:  # ZeRO-2/3's unit pool (llm/parallel/zero.h, bufpool.h), trimmed after each step to its keep
        largest = max(p for _, p in sizes)
        layer = max([p for (kind, _), (_, p) in zip(units, sizes) if kind not in ("embed", "final")] or [0])
        keep = largest + (ZERO_MAX_INFLIGHT + 1) * layer + ((largest + 2 * layer) if shard_params else 0)
        if not shard_params and a["m"] >= 2 and V == 1:
            live_pool, peak_pool = zero2_pool(units, sizes, held, ranges[0], keep)
            comm += live_pool * e
            peak_extra["comm_buffers"] = (peak_pool - live_pool) * e
        else:  # the releases race MPI's progress: modelled as the keep plus one more layer unit (not exact)
            comm += keep * e
            peak_extra["comm_buffers"] = layer * e
    mem["comm_buffers"] = comm
    if pp > 1 and not sim.get("vshape", 0) and pp_rank in (0, pp - 1):  # dp_tied_embedding_diff: mine and the partner's
        peak_extra["comm_buffers"] = max(peak_extra["comm_buffers"], 2 * sizes[0][1] * e)
    peak = dict(mem)
    for k in KINDS:
        peak[k] += peak_extra[k]
    return {"mem": mem, "peak": peak, "packed": packed, "shard_parameters": sum(n for n, _ in sizes), "held": held, "groups": groups,
            "sizes": sizes, "slots": slots_total, "ranges": ranges}
