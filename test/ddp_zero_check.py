#!/usr/bin/env python3
"""ddp_zero_check.py: the comparisons of test/test_ddp_zero.sh. Each command prints one line
("ok   ..." or "FAIL ...") and exits 0 or 1.

  compare NAME RUN REF LOSS_RTOL PARAM_ATOL   losses (train, val) and grad norms of every step in both
                                              logs, relative; every parameter of the final models, absolute
  first NAME RUN REF TOL                      the train loss of the first step (the initial model's
                                              forward), relative
  same NAME RUN REF                           final model and state files: identical bytes
  update NAME RUN REF START LOSS_RTOL REL_L2   losses of every step, relative; the update of every
                                              parameter (final FP32 master weights of the state files
                                              minus START, an llm.c checkpoint) in relative L2
  memory NAME REPORT                          each rank's parameters + gradients + optimizer state, as
                                              allocated (the tagged allocator's counts), against the
                                              ZeRO paper's formula, within the padding
  ledger NAME REPORT                          each rank's collectives of one step against sec. 7
  ratio NAME REPORT_ZERO3 REPORT_DDP          ZeRO-3's bytes sent per step / DDP's = 1.5 (x padding)
  order NAME REPORT                           the order of the last step's data-parallel operations
                                              (llm/parallel/ddp.h's trace): what the numbers cannot show
  tp_ledger NAME REPORT                       each rank's tensor-parallel traffic of one step against
                                              Megatron-LM's count (test/test_tp.sh)
  p2p NAME REPORT                             each rank's point-to-point rows of one step (pipeline) against
                                              the schedule's messages (test/test_pp.sh)
  peaks NAME REPORT                           each rank's allocator peaks against what must have been live
  peaks_pp NAME GPIPE_REPORT 1F1B_REPORT      the activation peaks of GPipe (m micro-batches alive) and 1F1B
                                              (min(P - r, m)) on each rank, in that proportion
  fp8 NAME RUN REF TOL [below1]               the FP8 per-tensor state of the step-1 state files
                                              (test/test_fp8_train.sh): every W entry's scale and amax
                                              history identical, the x and dy entries' within TOL relative;
                                              below1: and every layer of REF has a scale < 1
  fp8moe NAME RUN MODEL [REF TOL]             the experts' FP8 entries of RUN's step-1 state file (delayed
                                              or current scaling, test/test_moe_fp8.sh) against MODEL, the
                                              llm.c-style model file of the step's weights: each expert's fc
                                              and fcproj W amax (delayed) = max |W| of that expert's weights
                                              there, or W scale (current) = 448 / that, exactly; each
                                              expert's x amax (scale) > 0; delayed: the dense MLP's entries
                                              of a moe layer empty. REF: a run of the same step in another layout, whose
                                              experts' x entries of the first moe layer's fc RUN's match
                                              within TOL relative (the others' inputs come through FP8
                                              GEMMs whose step-1 current scales depend on the rows grouped
                                              into each GEMM: an FP8 rounding apart, measured 1.7e-2)
"""
import glob, json, os, struct, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt_verify  # the checksum of a state file, recomputed independently


def log_steps(run):
    steps = {}
    for line in open(os.path.join(run, "log.jsonl")):
        o = json.loads(line)
        if "train_loss" in o:
            steps[o["step"]] = o
    return steps


def final_file(run, prefix):
    files = sorted(glob.glob(os.path.join(run, prefix + "_*.bin")))
    return files[-1] if files else None


def params(path):
    raw = open(path, "rb").read()[1024:]
    return struct.unpack("%df" % (len(raw) // 4), raw)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def compare(name, run, ref, ltol, ptol):
    a, b = log_steps(run), log_steps(ref)
    common = sorted(set(a) & set(b))
    if not common or set(a) - set(b):
        return False, "%s: steps %s vs reference steps %s" % (name, sorted(a), sorted(b))
    dl = max(rel(a[s]["train_loss"], b[s]["train_loss"]) for s in common)
    dn = max(rel(a[s]["grad_norm"], b[s]["grad_norm"]) for s in common)
    vals = [rel(a[s]["val_loss"], b[s]["val_loss"]) for s in common if "val_loss" in a[s] and "val_loss" in b[s]]
    dv = max(vals) if vals else 0.0
    fa, fb = final_file(run, "model"), final_file(ref, "model")
    if fa is None or fb is None:
        return False, "%s: no final model in %s or %s" % (name, run, ref)
    pa, pb = params(fa), params(fb)
    if len(pa) != len(pb):
        return False, "%s: %d vs %d parameters" % (name, len(pa), len(pb))
    worst = max(range(len(pa)), key=lambda i: abs(pa[i] - pb[i]))
    dp = abs(pa[worst] - pb[worst])
    good = dl <= ltol and dn <= ltol and dv <= ltol and dp <= ptol
    return good, ("%s: %d steps, max rel diff loss %.2g, val loss %.2g, grad norm %.2g (tol %g); %d parameters "
                  "max |diff| %.2g at [%d] (tol %g)" % (name, len(common), dl, dv, dn, ltol, len(pa), dp, worst, ptol))


def first(name, run, ref, tol):
    a, b = log_steps(run), log_steps(ref)
    if 1 not in a or 1 not in b:
        return False, "%s: no step 1 in %s or %s" % (name, run, ref)
    d = rel(a[1]["train_loss"], b[1]["train_loss"])
    return d <= tol, "%s: step 1 train loss %.7f vs %.7f, rel diff %.2g (tol %g)" % (name, a[1]["train_loss"],
                                                                                 b[1]["train_loss"], d, tol)


def state_split(raw):
    """a state file's bytes but its checksum (header[35..37], checked here against the bytes: test/ckpt_verify.py)
    and its last H gradient norms (the health window, llm/ckpt/checkpoint.h header[31]), and those norms; None when the
    checksum does not match"""
    if len(raw) >= 1024:
        held, got = ckpt_verify.file_sum(raw, 35)
        if held is not None and held != got:
            return None, ()
        raw = raw[:140] + bytes(12) + raw[152:]
    h = struct.unpack("<i", raw[124:128])[0] if len(raw) >= 1024 else 0
    if h <= 0:
        return raw, ()
    # header[41] (version 4 on): the moe selection bias's floats, after the windows (compared as bytes)
    nb = max(struct.unpack("<i", raw[164:168])[0], 0) if struct.unpack("<i", raw[4:8])[0] >= 4 else 0
    end = len(raw) - 4 * nb
    return raw[:end - 4 * h] + raw[end:], struct.unpack("<%df" % h, raw[end - 4 * h:end])


# The health windows' gradient norms are the one thing in a state file that two layouts with the same
# update arithmetic may not share bit for bit: the norm sums the shards' squares in a layout's own
# order (see the top of test_ddp_zero.sh): measured up to 1.1e-7 relative (one or two ulps) over the
# layouts of test_ddp_zero, test_tp and test_pp; 1e-6 leaves ten times that. Every other byte must be
# the same.
NORM_RTOL = 1e-6


def same(name, run, ref):
    bad, note = [], ""
    for prefix in ("model", "state"):
        fa, fb = final_file(run, prefix), final_file(ref, prefix)
        if fa is None or fb is None:
            bad.append(prefix)
            continue
        ra, rb = open(fa, "rb").read(), open(fb, "rb").read()
        if prefix == "state":
            (ra, na), (rb, nb) = state_split(ra), state_split(rb)
            if ra is None or rb is None:
                bad.append("state (its checksum)")
            elif len(na) != len(nb) or any(rel(x, y) > NORM_RTOL for x, y in zip(na, nb)):
                bad.append("state (health window norms)")
            elif na:
                note = " (the health window's %d norms within %g)" % (len(na), max([rel(x, y) for x, y in zip(na, nb)] + [0.0]))
        if ra != rb:
            bad.append(prefix)
    if bad:
        return False, "%s: final %s files differ" % (name, " and ".join(bad))
    return True, "%s: final model and state files are the same bytes%s" % (name, note)


def master(path):  # the resumable state: Psi FP32 parameters (the master weights) after the header
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[40:48])[0]
    return struct.unpack("%df" % n, raw[1024:1024 + 4 * n])


def update(name, run, ref, start, ltol, rtol):
    a, b = log_steps(run), log_steps(ref)
    common = sorted(set(a) & set(b))
    if not common or set(a) - set(b):
        return False, "%s: steps %s vs reference steps %s" % (name, sorted(a), sorted(b))
    dl = max(rel(a[s]["train_loss"], b[s]["train_loss"]) for s in common)
    p0 = params(start)
    pa, pb = master(final_file(run, "state")), master(final_file(ref, "state"))
    if not len(p0) == len(pa) == len(pb):
        return False, "%s: %d, %d, %d parameters" % (name, len(p0), len(pa), len(pb))
    ua = [x - z for x, z in zip(pa, p0)]
    ub = [y - z for y, z in zip(pb, p0)]
    err = sum((x - y) ** 2 for x, y in zip(ua, ub)) ** 0.5 / max(sum(y * y for y in ub) ** 0.5, 1e-30)
    good = dl <= ltol and err <= rtol
    return good, ("%s: %d steps, max rel diff loss %.2g (tol %g); the update of %d parameters: |run - ref| / |ref| = %.3g "
                  "in L2 (tol %g; 1 for a missing update)" % (name, len(common), dl, ltol, len(pa), err, rtol))


def fp8_state(path):  # (recipe, layers, the FP8 floats: [pos, recorded, per entry: scale, history (H)])
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    k = (h[20] & 0xffffffff) | (h[21] << 32)
    nb = max(h[41], 0) if h[1] >= 4 else 0  # header[41]: the moe selection bias's floats, last
    end = len(raw) - 4 * nb - 8 * max(h[31], 0)  # header[31]: the health windows (2 x h[31] floats) follow the FP8 state
    return h[19], h[6], struct.unpack("<%df" % k, raw[end - 4 * k:end]) if k else ()


def fp8(name, run, ref, tol, below1=False):
    # entry (l * 4 + linear) * 3 + tensor, tensor 0 x, 1 W, 2 dy (llm/precision/fp8_linear.h); 1 delayed, 2 current.
    # below1: REF must also hold, in every layer, a scale below 1 (an amax above the format's max): a
    # pipeline stage that exported the layers it does not hold (their scales still the initial 1) into the
    # max over the pipeline would raise exactly those to 1; scales >= 1 cannot show it
    fa, fb = os.path.join(run, "state_00000001.bin"), os.path.join(ref, "state_00000001.bin")
    if not (os.path.exists(fa) and os.path.exists(fb)):
        return False, "%s: no state_00000001.bin in %s or %s" % (name, run, ref)
    (ra, L, a), (rb, Lb, b) = fp8_state(fa), fp8_state(fb)
    n = L * 4 * 3
    if ra != rb or ra not in (1, 2) or L != Lb or len(a) != len(b) or (len(a) - 2) % n:
        return False, "%s: FP8 state of recipe %d, %d floats vs recipe %d, %d floats" % (name, ra, len(a), rb, len(b))
    per = (len(a) - 2) // n  # 1 + H
    if a[:2] != b[:2]:
        return False, "%s: FP8 pos, recorded %s vs %s" % (name, a[:2], b[:2])
    w_diff, worst, where = 0, 0.0, None
    for i in range(n):
        for j in range(per):
            x, y = a[2 + i * per + j], b[2 + i * per + j]
            if i % 3 == 1:
                w_diff += x != y
                continue
            d = 0.0 if x == y else abs(x - y) / max(abs(y), 1e-30)
            if d > worst:
                worst, where = d, (i, j)
    what = "" if where is None else " (layer %d %s %s %s)" % (
        where[0] // 12, ("qkv", "attproj", "fc", "fcproj")[where[0] // 3 % 4], "x" if where[0] % 3 == 0 else "dy",
        "scale" if where[1] == 0 else "amax")
    good = w_diff == 0 and worst <= tol
    note = ""
    if below1:  # per layer, the entries of REF whose scale is below 1
        low = [sum(1 for i in range(l * 12, l * 12 + 12) if b[2 + i * per] < 1.0) for l in range(L)]
        good = good and min(low) > 0
        note = "; scales < 1 per layer in the reference %s (each layer needs one)" % low
    return good, ("%s: step 1 FP8 state (%s, %d entries): W's scales and amaxes %d differ (expected 0); x and dy max rel "
                  "diff %.2g%s (tol %g)%s" % (name, "delayed" if ra == 1 else "current", n, w_diff, worst, what, tol, note))


def model_experts(path):  # {(layer, expert, 0 fc | 1 fcproj): max |W|} of a moe model file (docs/formats.md), L, E
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    if h[1] not in (6,):
        raise SystemExit("fp8moe: %s: expected an FP32 moe model file (version 6), found version %d" % (path, h[1]))
    maxT, V, L, NH, C, Vp = h[2:8]
    E, M = h[8], h[10]
    moe = [l for l in range(L) if l % M == 0]
    nd, nm = L - len(moe), len(moe)
    # in file order: wte wpe ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb (dense layers),
    # router efcw efcb efcprojw efcprojb (moe layers), lnfw lnfb
    sizes = [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
             nd * 4 * C * C, nd * 4 * C, nd * C * 4 * C, nd * C, nm * E * C, nm * E * 4 * C * C, nm * E * 4 * C,
             nm * E * C * 4 * C, nm * E * C, C, C]
    if 1024 + 4 * sum(sizes) != len(raw):
        raise SystemExit("fp8moe: %s: %d bytes, expected %d for this layout" % (path, len(raw), 1024 + 4 * sum(sizes)))
    out = {}
    for k, t in ((0, 15), (1, 17)):  # efcw, efcprojw: (E, 4C, C) and (E, C, 4C) per moe layer
        off, per = 1024 + 4 * sum(sizes[:t]), 4 * C * C
        for j, l in enumerate(moe):
            for e in range(E):
                w = struct.unpack_from("<%df" % per, raw, off + 4 * (j * E + e) * per)
                out[(l, e, k)] = max(abs(v) for v in w)
    return out, L, E, moe


def fp8moe(name, run, model, ref=None, tol=0.0):
    amax, L, E, moe = model_experts(model)
    path = os.path.join(run, "state_00000001.bin")
    if not os.path.exists(path):
        return False, "%s: no %s" % (name, path)
    r, _, a = fp8_state(path)
    n = L * 12 + L * E * 6
    if r not in (1, 2) or len(a) < 2 or (len(a) - 2) % n:
        return False, "%s: FP8 state of recipe %d, %d floats; expected delayed (1) or current (2), 2 + %d x (1 + H)" % (
            name, r, len(a), n)
    per = (len(a) - 2) // n
    if a[:2] != ((1.0, 1.0) if r == 1 else (0.0, 0.0)):
        return False, "%s: FP8 pos, recorded %s after step 1" % (name, a[:2])
    f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
    # delayed: the amax step 1 recorded (ring slot 0); current: the last scale, E4M3's fp8_max / amax rounded to FP32
    entry = lambda slot, t: a[2 + (slot * 3 + t) * per + (1 if r == 1 else 0)]
    if r == 2:
        amax = {k: f32(448.0 / v) for k, v in amax.items()}
    w_bad, x_zero, dense_bad, worst, where = [], [], 0, 0.0, None
    b = fp8_state(os.path.join(ref, "state_00000001.bin"))[2] if ref else None
    for l in moe:
        dense_bad += sum(entry(l * 4 + k, t) != 0.0 for k in (2, 3) for t in range(3)) if r == 1 else 0
        for e in range(E):
            for k in (0, 1):
                slot = L * 4 + (l * E + e) * 2 + k
                if entry(slot, 1) != amax[(l, e, k)]:
                    w_bad.append("layer %d expert %d %s: %.9g, expected %.9g" % (l, e, ("fc", "fcproj")[k], entry(slot, 1), amax[(l, e, k)]))
                if not entry(slot, 0) > 0.0:
                    x_zero.append((l, e, k))
                if b is not None and l == moe[0] and k == 0:  # (see the top of this file)
                    y = b[2 + (slot * 3) * per + 1]
                    d = 0.0 if entry(slot, 0) == y else abs(entry(slot, 0) - y) / max(abs(y), 1e-30)
                    if d > worst:
                        worst, where = d, (l, e, k)
    good = not w_bad and not x_zero and dense_bad == 0 and worst <= tol
    cmp = "" if b is None else "; the first moe layer's experts' fc x amax vs %s max rel diff %.2g%s (tol %g)" % (
        ref, worst, "" if where is None else " (layer %d expert %d %s)" % (where[0], where[1], ("fc", "fcproj")[where[2]]), tol)
    return good, ("%s: step-1 FP8 state, %d moe layers x %d experts x (fc, fcproj): W amax (delayed) or scale (current) from max|W| of the model file for "
                  "%d of %d%s; x amax or scale > 0 for %d of %d; dense MLP entries of moe layers non-zero: %d (expected 0)%s" % (
                      name, len(moe), E, 2 * E * len(moe) - len(w_bad), 2 * E * len(moe),
                      " (first wrong: %s)" % w_bad[0] if w_bad else "", 2 * E * len(moe) - len(x_zero), 2 * E * len(moe),
                      dense_bad, cmp))


def memory(name, report):
    r = json.load(open(report))
    # Psi: the parameters one model-parallel (tp) rank holds, the whole model without tensor parallelism
    psi, packed, N = r.get("shard_parameters", r["num_parameters"]), r["packed_parameters"], r["dp"]
    paper = r["paper_model_states_bytes"]
    per = 2 * r["bytes_per_value"] + r["optimizer_bytes_per_param"]  # p + g + K
    slack = per * (packed - psi)  # the padding, at most
    worst = None
    for rk in r["ranks"]:
        # a pipeline stage holds its own units: its Psi and prediction are its own
        psi, packed = rk.get("shard_parameters", psi), rk.get("packed_parameters", packed)
        paper, slack = rk.get("paper_model_states_bytes", paper), per * (packed - psi)
        # measured: what the tagged allocator counted as parameters, gradients, moments, master weights
        m = rk["params_bytes"] + rk["grads_bytes"] + rk["moments_bytes"] + rk["master_bytes"]
        if not (paper <= m <= paper + slack):
            return False, "%s: rank %d holds %d B, paper (%s) %.0f B, padding allows +%d B" % (
                name, rk["rank"], m, r["paper_formula"], paper, slack)
        worst = m
    return True, "%s: %d ranks x %d B = %.3f B/param; paper %s = %.3f B/param (+%d B padding of %d units)" % (
        name, len(r["ranks"]), worst, worst / psi, r["paper_formula"], paper / psi, worst - paper, r["num_units"])


def ledger(name, report):
    r = json.load(open(report))
    zero, N, x = r["stage"], r["dp"] * r.get("cp", 1), r["bytes_per_value"]  # the gradient group: dp x cp
    S, P, accum = x * r.get("shard_parameters", r["num_parameters"]), x * r["packed_parameters"], r["grad_accum"]
    loss = 4 if N > 1 else 0
    # payload bytes per kind of one step: the gradient/parameter traffic plus the 4-byte scalars
    # (the loss average; the norm's sum of squares in ZeRO-1/2/3)
    want = {0: {"all_reduce": S + loss},
            1: {"all_reduce": loss + 4, "reduce_scatter": P, "all_gather": P},
            2: {"all_reduce": loss + 4, "reduce_scatter": P, "all_gather": P},
            3: {"all_reduce": loss + 4, "reduce_scatter": P, "all_gather": 2 * accum * P}}[zero]
    for rk in r["ranks"]:
        got = {row["kind"]: row["payload_bytes"] for row in rk["ledger_step"]["rows"] if row["group"] == "dp"}
        other = [row for row in rk["ledger_step"]["rows"] if row["group"] not in ("dp", "tp", "cp")]  # tp_ledger, cp_check.py
        if got != want or other:
            return False, "%s: rank %d payload per step %s, expected %s" % (name, rk["rank"], got, want)
        sent = sum(row["sent_bytes"] for row in rk["ledger_step"]["rows"] if row["group"] == "dp")
        scalars = (2.0 * (N - 1) / N) * (want["all_reduce"] - (S if zero == 0 else 0))
        if abs(sent - scalars - r["paper_sent_bytes_per_step"]) > 1.0:
            return False, "%s: rank %d sent %.1f B per step, paper %.1f B + scalars %.1f B" % (
                name, rk["rank"], sent, r["paper_sent_bytes_per_step"], scalars)
    formula = {0: "2(N-1)/N S", 1: "2(N-1)/N P", 2: "2(N-1)/N P",
               3: "%d(N-1)/N P" % (2 * accum + 1)}[zero]
    return True, "%s: payload per step %s; sent %.0f B = %s (S = %d B gradient, P = %d B padded)" % (
        name, " ".join("%s %d" % kv for kv in sorted(want.items())), r["paper_sent_bytes_per_step"], formula, S, P)


def tp_ledger(name, report):
    """The tensor-parallel traffic of one step against Megatron-LM (Shoeybi et al. 2019, sec. 3): per
    micro-batch, per layer 2 all-reduces of the (B,T,C) activations in the forward (g after attproj and
    fcproj) and 2 in the backward (f before QKV and fc), plus one for the vocabulary-parallel embedding
    and one for the LM head's input gradient; the vocabulary-parallel cross-entropy all-gathers 3 floats
    per token and rank; the gradient norm adds one 4-byte all-reduce. Sent: 2(t-1)/t of an all-reduce's
    payload, (t-1)/t of an all-gather's or reduce-scatter's (ring).
    With sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2) each all-reduce becomes a reduce-
    scatter plus an all-gather of the same (B,T,C): per layer, forward 2 all-gathers (QKV's and fc's
    inputs) and 2 reduce-scatters (attproj's and fcproj's outputs), backward 2 all-gathers (the output
    gradients of fcproj and attproj), 2 reduce-scatters (the input gradients of fc and QKV) and 2 more
    all-gathers (QKV's and fc's inputs again, for their weight gradients: not kept); the head: an
    all-gather forward, one again and a reduce-scatter backward; the embedding: a reduce-scatter
    forward, an all-gather backward. And one all-reduce of the LayerNorms' gradient pieces each rank
    owns: over the dp group, the LayerNorms' (2L + 1) 2C values (under DDP every dp rank owns them all)."""
    r = json.load(open(report))
    t, L, B, T, C, x, accum = r["tp"], r["L"], r["B"], r["T"], r["C"], r["bytes_per_value"], r["grad_accum"]
    sp = r.get("sequence_parallel", 0)
    BTC = B * T * C * x
    ce = 3 * B * T * 4 * t  # the cross-entropy's row states, all-gathered
    if sp:
        want = {"all_gather": (accum * (6 * L + 4), accum * ((6 * L + 3) * BTC + ce)),
                "reduce_scatter": (accum * (4 * L + 2), accum * (4 * L + 2) * BTC)}
    else:
        want = {"all_reduce": (accum * (4 * L + 2) + 1, accum * (4 * L + 2) * BTC + 4), "all_gather": (accum, accum * ce)}
    norms = 0.0  # sp: the LayerNorm gradients all-reduced by the ranks of tp rank 0, summed
    for rk in r["ranks"]:
        rows = {row["kind"]: row for row in rk["ledger_step"]["rows"] if row["group"] == "tp"}
        got = {k: (v["calls"], v["payload_bytes"]) for k, v in rows.items()}
        if sp:
            ar = got.pop("all_reduce", (0, 0))
            if ar[0] not in (1, 2) or (ar[0] == 2) != (ar[1] > 4):
                return False, "%s: rank %d tp all-reduces per step %s, expected the norm's and at most one of LayerNorm gradients" % (name, rk["rank"], ar)
            if rk["rank"] % t == 0:
                norms += ar[1] - 4
        if got != want:
            return False, "%s: rank %d tp calls and payload per step %s, expected %s" % (name, rk["rank"], got, want)
        sent_want = sum((2.0 if k == "all_reduce" else 1.0) * (t - 1) / t * rows[k]["payload_bytes"] for k in rows)
        sent = sum(v["sent_bytes"] for v in rows.values())
        if abs(sent - sent_want) > 1.0:
            return False, "%s: rank %d sent %.1f B on tp per step, expected %.1f B" % (name, rk["rank"], sent, sent_want)
    # DDP: every dp rank owns all of them; ZeRO: the dp ranks' pieces add up to them once
    owners = r["dp"] if r["stage"] == 0 else 1
    if sp and norms != owners * (2 * L + 1) * 2 * C * x:
        return False, "%s: LayerNorm gradients all-reduced over tp: %d B over the dp group, expected %d x (2L+1) 2C x %d = %d B" % (
            name, norms, owners, x, owners * (2 * L + 1) * 2 * C * x)
    per_layer = "6 all-gathers + 4 reduce-scatters of BTC (10 BTC (t-1)/t sent)" if sp else "4 all-reduces of BTC (8 BTC (t-1)/t sent)"
    return True, "%s: tp per step %s; per layer and micro-batch %s" % (
        name, " ".join("%s %d calls %d B" % (k, v[0], v[1]) for k, v in sorted(want.items())), per_layer)


def p2p(name, report):
    """The pipeline's messages of one step (llm/parallel/pipeline.h, llm/parallel/schedule.h), from the layout alone: the S = P V
    virtual stages run in a chain, virtual stage s = c P + r on rank r (its chunk c). Every micro-batch's
    forward sends its output activation from s to s + 1 and its backward the input gradient from s to
    s - 1: per step, virtual stage s sends m activations if s < S - 1 and m gradients if s > 0, and
    receives as many from its neighbours (the report's "stages" and "head_pp_rank" give the placement: in the V
    of zbv and dualpipev stages P - 1 and P are on one rank and hand over without a message, and the loss
    is broadcast from pp rank 0); each message is one (R, C) tensor, R = B T (B T / t with
    sequence parallelism: the stages exchange the sequence-parallel shards), of bytes_per_value each.
    The ledger (llm/comm/comm_ledger.h) counts a send's payload as sent, a receive's as 0 sent. The loss goes
    from the last stage to the others by one 4-byte broadcast on the pp group (sent by its root)."""
    r = json.load(open(report))
    P, m, x, C = r["pp"], r["grad_accum"], r["bytes_per_value"], r["C"]
    R = r["B"] * r["T"] // (r["tp"] if r.get("sequence_parallel", 0) else 1)
    msg = R * C * x
    for rk in r["ranks"]:
        p, V = rk["pp_rank"], rk.get("V", 1)
        S = P * V
        stages = rk.get("stages", [c * P + p for c in range(V)])  # the placement (the V: r and 2P - 1 - r)
        head = rk.get("head_pp_rank", P - 1)
        # F to s + 1, B to s - 1, unless that stage is on this rank too (the V's turn: a hand-off, no message)
        n_send = sum(m * ((s < S - 1 and s + 1 not in stages) + (s > 0 and s - 1 not in stages)) for s in stages)
        n_recv = n_send  # F from s - 1, B from s + 1: the same neighbours
        want = {("send", "pp"): (n_send, n_send * msg, float(n_send * msg)), ("recv", "pp"): (n_recv, n_recv * msg, 0.0),
                ("broadcast", "pp"): (1, 4, 4.0 if p == head else 0.0)}
        got = {(row["kind"], row["group"]): (row["calls"], row["payload_bytes"], row["sent_bytes"]) for row in rk["ledger_step"]["rows"]
               if row["kind"] in ("send", "recv", "broadcast")}
        if got != want:
            return False, "%s: rank %d (pp rank %d of %d, stages %s, m = %d): send/recv/broadcast rows (calls, payload, sent) %s, expected %s" % (
                name, rk["rank"], p, P, stages, m, sorted(got.items()), sorted(want.items()))
    return True, "%s: every rank's pp sends and receives (calls, payload, sent) = m = %d messages of R C x = %d B per neighbour and direction of each virtual stage, the loss's broadcast 4 B" % (
        name, m, msg)


STATIC_KINDS = ("params", "grads", "moments", "master", "activations")
PEAK_KINDS = STATIC_KINDS + ("comm_buffers", "workspace")


def peaks(name, report):
    """The tagged allocator's peaks (llm/core/context.h: *_peak_bytes, the most of a kind live at once) against
    what must have been live: every peak at least the bytes live at the end; the parameters, gradients,
    optimizer states and activations are allocated once at the start and held to the end (llm/parallel/dp.h,
    llm/ops/optimizer.h, the stages' activation slots: llm/model/stage.h, llm/parallel/pipeline.h), so their peak is what is
    live at the end, and a pipeline's activations are its slots (pipeline_activation_bytes, measured as
    they were allocated). Communication buffers: with a pipeline every rank sends its units to the first
    stage for each gathered checkpoint in one (Psi + U) float buffer (llm/parallel/dp_export.h dp_pp_to_first_stage)
    while its message buffers are live: the peak is at least live + 4 (Psi + U); without data or tensor
    parallelism (no other temporaries: ZeRO's gathers, the tp gather of a checkpoint, sequence
    parallelism's LayerNorm all-reduce) it is exactly that, the largest of the temporaries (the tied
    embedding's comparison at the end takes 2 x the embedding unit, less)."""
    r = json.load(open(report))
    extra = 4 * (r["num_parameters"] + r["num_units"]) if r["pp"] > 1 else 0
    exact = r["pp"] > 1 and r["dp"] == 1 and r["tp"] == 1
    for rk in r["ranks"]:
        for k in PEAK_KINDS:
            live, peak = rk[k + "_bytes"], rk[k + "_peak_bytes"]
            if peak < live or (k in STATIC_KINDS and peak != live):
                return False, "%s: rank %d %s: peak %d B, live at the end %d B (expected %s)" % (
                    name, rk["rank"], k, peak, live, "equal: allocated once" if k in STATIC_KINDS else "peak >= live")
        if "pipeline_activation_bytes" in rk and rk["activations_peak_bytes"] != rk["pipeline_activation_bytes"]:
            return False, "%s: rank %d: activations peak %d B, the pipeline's slots took %d B" % (
                name, rk["rank"], rk["activations_peak_bytes"], rk["pipeline_activation_bytes"])
        live, peak = rk["comm_buffers_bytes"], rk["comm_buffers_peak_bytes"]
        if peak < live + extra or (exact and peak != live + extra):
            return False, "%s: rank %d: communication buffers peak %d B, live at the end %d B + the checkpoint's gather 4 (Psi + U) = %d B: expected %s %d" % (
                name, rk["rank"], peak, live, extra, "==" if exact else ">=", live + extra)
    return True, "%s: %d ranks: every peak >= its live bytes; parameters, gradients, moments, master, activations peak = live%s; communication peak %s live + %s" % (
        name, len(r["ranks"]), " = the pipeline's slots" if r["pp"] > 1 else "", "=" if exact else ">=",
        "4 (Psi + U) = %d B" % extra if extra else "0")


def peaks_pp(name, report_g, report_f):
    g, f = json.load(open(report_g)), json.load(open(report_f))
    P, m = g["pp"], g["grad_accum"]
    rows = []
    for rg, rf in zip(sorted(g["ranks"], key=lambda r: r["pp_rank"]), sorted(f["ranks"], key=lambda r: r["pp_rank"])):
        p = rg["pp_rank"]
        a, b = rg["activations_peak_bytes"], rf["activations_peak_bytes"]
        # the same slot size in both; GPipe holds all m micro-batches, 1F1B min(P - p, m)
        if a * min(P - p, m) != b * m or a <= 0:
            return False, "%s: pp rank %d: activation peaks GPipe %d B, 1F1B %d B: expected in the ratio m : min(P - r, m) = %d : %d" % (
                name, p, a, b, m, min(P - p, m))
        rows.append("%d: %d / %d" % (p, a, b))
    return True, "%s: activation peaks per pp rank, GPipe / 1F1B = m / min(P - r, m) (P = %d, m = %d): %s" % (name, P, m, "; ".join(rows))


def order(name, report):
    """Each rank's trace of its last step (F u / B u: the forward / backward of unit u begins, G u: the
    all-gather of unit u starts, R u: the reduction of unit u's gradients starts, E: the backward is
    over). Units: 0 the embedding, 1..L the layers, L+1 the final LayerNorm."""
    r = json.load(open(report))
    zero, U, accum = r["stage"], r["num_units"], r["grad_accum"]
    bwd = [0, U - 1] + list(range(U - 2, 0, -1))  # the LM head (embedding), final, layers L..1
    for rk in r["ranks"]:
        ev = [(t[0], int(t[1:]) if len(t) > 1 else -1) for t in rk["dp_events"].split()]
        where = "%s: rank %d" % (name, rk["rank"])
        if rk["dp_events_dropped"] or not ev:
            return False, "%s: %d events, %d dropped" % (where, len(ev), rk["dp_events_dropped"])
        starts = [i for i, (w, u) in enumerate(ev) if w == "F" and u == 0]  # each micro-step's forward
        if len(starts) != accum:
            return False, "%s: %d forwards in the step, expected %d micro-steps" % (where, len(starts), accum)
        last = starts[-1]
        e = [i for i, (w, _) in enumerate(ev) if w == "E"]
        R = {u: i for i, (w, u) in enumerate(ev) if w == "R"}
        nR = sum(1 for w, _ in ev if w == "R")
        # 1. every unit's gradients reduced once, in the last micro-step only (no_sync before it), and each
        # reduction started as soon as its unit's backward is done: before the next unit's backward begins,
        # so communication overlaps the rest of the backward (PyTorch DDP sec. 3.2.3; ZeRO sec. 5.2)
        if len(e) != 1 or nR != U or sorted(R) != list(range(U)) or min(R.values()) < last or max(R.values()) > e[0]:
            return False, "%s: reductions %s in the last micro-step from event %d to the end of the backward %s" % (where, R, last, e)
        # the reductions in flight are driven along (polled) during the backward, after each launch but the
        # last: over MPI a non-blocking collective moves only inside MPI calls
        P = [i for i, (w, _) in enumerate(ev) if w == "P"]
        for u, i in R.items():
            if i != max(R.values()) and not any(i < p < e[0] for p in P):
                return False, "%s: no poll of the reductions in flight after unit %d's started (event %d), before the end of the backward" % (where, u, i)
        B = {u: i for i, (w, u) in enumerate(ev) if w == "B" and i > last}
        for u, nxt in zip(bwd[1:], bwd[2:]):
            if not R[u] < B[nxt]:
                return False, "%s: the reduction of unit %d starts at event %d, after the backward of unit %d (%d)" % (where, u, R[u], nxt, B[nxt])
        G = [(i, u) for i, (w, u) in enumerate(ev) if w == "G"]
        if zero == 0 and G:
            return False, "%s: DDP gathered parameters: %s" % (where, G)
        if zero in (1, 2) and (len(G) != U or min(i for i, _ in G) < e[0] or sorted(u for _, u in G) != list(range(U))):
            return False, "%s: ZeRO-%d must gather each updated unit once after the backward; gathers %s, backward over at %d" % (where, zero, G, e[0])
        if zero == 3:
            # 2. each pass (a micro-step's forward, or its backward) gathers every unit once, and the next
            # unit's gather starts before the current unit is computed (prefetch), ZeRO sec. 5.3
            # micro-step m: from after micro-step m-1's last backward event to its own last one
            ends = [max(i for i, (w, _) in enumerate(ev) if w == "B" and i < (starts[m + 1] if m + 1 < accum else len(ev)))
                    for m in range(accum)]
            for m in range(accum):
                seg = list(enumerate(ev))[(ends[m - 1] + 1 if m else 0):ends[m] + 1]
                last_f = max(k for k, (i, (w, _)) in enumerate(seg) if w == "F")
                for kind, part in (("F", seg[:last_f + 1]), ("B", seg[last_f + 1:])):
                    comp = [(i, u) for i, (w, u) in part if w == kind]
                    gath = [(i, u) for i, (w, u) in part if w == "G"]
                    if sorted(u for _, u in gath) != list(range(U)):
                        return False, "%s: micro-step %d, %s pass gathers units %s, expected each of %d once" % (
                            where, m, "forward" if kind == "F" else "backward", sorted(u for _, u in gath), U)
                    gi = {u: i for i, u in gath}
                    for (i, u), (_, nxt) in zip(comp, comp[1:]):
                        if not gi[nxt] < i:
                            return False, "%s: micro-step %d: unit %d is gathered at event %d, after unit %d's %s began (%d): no prefetch" % (
                                where, m, nxt, gi[nxt], u, "forward" if kind == "F" else "backward", i)
    what = {0: "no gathers", 1: "each updated unit gathered once after the backward", 2: "each updated unit gathered once after the backward",
            3: "every pass gathers each unit once, the next one before the current one is computed"}[zero]
    return True, "%s: %d ranks; each unit's gradients reduced once, in the last of %d micro-step(s), before the next unit's " \
                 "backward begins, driven by polls during the backward; %s" % (name, len(r["ranks"]), accum, what)


def ratio(name, report3, report0):
    a, b = json.load(open(report3)), json.load(open(report0))
    sa = sum(row["sent_bytes"] for row in a["ranks"][0]["ledger_step"]["rows"] if row["kind"] != "all_reduce")
    sb = sum(row["sent_bytes"] for row in b["ranks"][0]["ledger_step"]["rows"]) - 2.0 * (b["dp"] - 1) / b["dp"] * 4
    q, pad = sa / sb, a["packed_parameters"] / a["num_parameters"]
    good = a["grad_accum"] == 1 and 1.5 - 1e-9 <= q <= 1.5 * pad + 1e-9
    return good, "%s: ZeRO-3 sends %.0f B per step for gradients and parameters, DDP %.0f B: ratio %.4f " \
                 "(paper 1.5; x %.4f for the padding)" % (name, sa, sb, q, pad)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "compare":
        good, msg = compare(args[0], args[1], args[2], float(args[3]), float(args[4]))
    elif cmd == "first":
        good, msg = first(args[0], args[1], args[2], float(args[3]))
    elif cmd == "same":
        good, msg = same(*args)
    elif cmd == "update":
        good, msg = update(args[0], args[1], args[2], args[3], float(args[4]), float(args[5]))
    elif cmd == "fp8":
        good, msg = fp8(args[0], args[1], args[2], float(args[3]), len(args) > 4 and args[4] == "below1")
    elif cmd == "fp8moe":
        good, msg = fp8moe(args[0], args[1], args[2], args[3] if len(args) > 3 else None, float(args[4]) if len(args) > 4 else 0.0)
    elif cmd == "memory":
        good, msg = memory(*args)
    elif cmd == "ledger":
        good, msg = ledger(*args)
    elif cmd == "tp_ledger":
        good, msg = tp_ledger(*args)
    elif cmd == "ratio":
        good, msg = ratio(*args)
    elif cmd == "p2p":
        good, msg = p2p(*args)
    elif cmd == "peaks":
        good, msg = peaks(*args)
    elif cmd == "peaks_pp":
        good, msg = peaks_pp(*args)
    elif cmd == "order":
        good, msg = order(*args)
    else:
        sys.exit("ddp_zero_check.py: unknown command " + cmd)
    print(("ok   " if good else "FAIL ") + msg)
    sys.exit(0 if good else 1)
