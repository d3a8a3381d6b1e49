#!/usr/bin/env python3
"""plan_ledger.py: the collectives one rank runs per step, as the trainer's comm ledger (llm/comm/comm_ledger.h)
counts them: per (kind, group) the calls, the payload bytes and the bytes sent under the ring model."""
from plan_layout import TENSORS, dim, is_moe, unit_kinds
from plan_memory import moe_rows


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
        gorder = ["world", "dp", "tp", "pp", "embed", "cp", "ep", "edp"]
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
    ep = a.get("ep", 1)
    sizes = {"world": a["world"], "dp": N, "tp": tp, "pp": pp, "embed": 2 if ends else 1, "cp": cp, "ep": ep, "edp": N // ep}
    led = Ledger(sizes)
    m = a["m"]
    # each held unit's padded values and its gradient group: an experts unit split by expert parallelism reduces
    # over edp (the ranks holding the same experts, llm/parallel/dp.h dp_unit_group), every other unit over dp
    held = [(rm["sizes"][u][1], "edp" if rm["groups"][u] != N else "dp") for u in sorted(rm["held"])]
    # data parallelism (llm/parallel/ddp.h, zero.h): per unit of this stage, in its last micro-batch
    if a["zero"] == 0:
        for p, g in held:
            led.add("all_reduce", g, p * e)
        if N > 1:
            led.add("all_reduce", "dp", 4)  # the loss
        if ep > 1:  # the experts' squared norm summed over the ep group (dp_grad_norm: replicated gradients)
            led.add("all_reduce", "ep", 4)
    else:
        for p, g in held:
            led.add("reduce_scatter", g, p * e)
            led.add("all_gather", g, p * e, calls=1 if a["zero"] < 3 else 2 * m)
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
    # expert parallelism (llm/sharded/expert_parallel.h): per moe layer of each chunk and micro-batch, 5 all-to-alls
    # of the ep group: the per-expert row counts (E floats, FP32 whatever the build), the dispatch and the combine
    # of the rows forward, and of their gradients backward (a moe layer is never recomputed). A dispatch's payload is
    # this rank's kept copies (N_tok K without drops, at most E x capacity), a combine's the copies its experts
    # received: planned as the uniform routing's expectation, the same count, (ep-1)/ep of it leaving the rank (the
    # ledger records the real routing's bytes: equal summed over the ep group when nothing is dropped, test_plan).
    # N_tok: the rank's tokens (1/tp of them under sp), the capacity the whole micro-batch's (llm/sharded/moe_sequence.h)
    if ep > 1:
        G = cp * (tp if a["sp"] and tp > 1 else 1)
        Ntok = a["B"] * (a["T"] // cp) // (tp if a["sp"] and tp > 1 else 1)
        R = moe_rows(a["cfg"], Ntok, ep, a["capf"], G=G)[0]
        nmoe = sum(1 for l0, l1, _, _ in rm["ranges"] for l in range(l0, l1) if is_moe(a["cfg"], l)) * m
        led.add("all_to_all", "ep", a["cfg"]["E"] * 4, calls=nmoe)
        led.add("all_to_all", "ep", R * a["cfg"]["C"] * e, calls=4 * nmoe)
    # a moe model's routed and dropped counts per layer and expert summed over dp and pp (and tp under sp), its aux and
    # z losses over pp (train_gpt.cu, once per step); with a micro-batch's tokens split over cp, tp under sp, or both,
    # each moe layer all-gathers the router logits of the whole micro-batch, (B T) x E FP32, once per micro-batch
    # (llm/sharded/moe_sequence.h; a moe layer is never recomputed): over cp or tp, or over tp (the cp rank's B T / cp
    # tokens) then cp (the whole micro-batch's)
    if a["cfg"]["E"] > 0:
        n = a["cfg"]["L"] * 2 * a["cfg"]["E"] * 4
        spt = a["sp"] and tp > 1
        n_moe = sum(1 for l0, l1, _, _ in rm["ranges"] for l in range(l0, l1) if is_moe(a["cfg"], l))
        if spt:
            led.add("all_gather", "tp", a["B"] * (a["T"] // cp) * a["cfg"]["E"] * 4, calls=n_moe * m)
        if cp > 1:
            led.add("all_gather", "cp", a["B"] * a["T"] * a["cfg"]["E"] * 4, calls=n_moe * m)
        if spt:
            led.add("all_reduce", "tp", n)
        if N > 1:
            led.add("all_reduce", "dp", n)
            led.add("all_reduce", "dp", 4, calls=2)  # the aux and z losses' means (dp_mean)
        if pp > 1:
            led.add("all_reduce", "pp", n)
            led.add("all_reduce", "pp", 8)
    # FP8 (llm/precision/fp8_linear.h): delayed scaling all-reduces the step's amax table (every layer's 4 linears x 3
    # tensors) over the world once per step; current scaling reduces each quantized operand's amax over tp and cp,
    # 6 operands per linear and micro-batch (forward x, w; dgrad dy, w; wgrad dy, x), 2 more under full recompute.
    # (Delayed also does that in its first step, before it has a history: not the steady step planned here.)
    if a["fp8"] == "delayed":
        led.add("all_reduce", "world", a["cfg"]["L"] * 12 * 4)
    elif a["fp8"] == "current":
        nl = sum(l1 - l0 for l0, l1, _, _ in rm["ranges"]) * m
        ops = nl * 4 * (6 + (2 if a["recompute"] == "full" else 0))
        if tp > 1:
            led.add("all_reduce", "tp", 4, calls=ops)
        if cp > 1:
            led.add("all_reduce", "cp", 4, calls=ops)
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
