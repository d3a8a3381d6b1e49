#!/usr/bin/env python3
"""cp_check.py: the context-parallel checks of test/test_cp.sh against the papers' counts, from the
--report-json files (each rank's ledger of the last step and its allocator's activation bytes). Each
command prints one line ("ok   ..." or "FAIL ...") and exits 0 or 1.

  ledger NAME REPORT              the cp group's traffic of one step on every rank, against the formulas
                                  (computed here, from the shapes, not read from the program):
      ring (Liu et al. 2023):     per layer and micro-batch, N-1 K/V blocks forward; N-1 K/V blocks and
                                  N-1 FP32 dK/dV blocks backward (the forward's again under recompute);
                                  a K/V block = B T/N 2 C/tp values, sent and received point to point
      ulysses (Jacobs et al.):    per layer and micro-batch, all-to-alls of q,k,v (3 slices) and out (1)
                                  forward, of dout (1) and dq,dk,dv (3) backward (the forward's again
                                  under recompute); a slice = B T/N C/tp values; each rank sends (N-1)/N
                                  of an all-to-all's buffer
      both:                       the loss, averaged over cp once per step: an all-reduce of 2 floats
  acts NAME REPORT ONE            activations per layer and micro-batch on every rank: measured (the tagged
                                  allocator) == llm/train/report.h's formula, and N times it within the
                                  64-byte rounding of the fields == ONE's measured (one process; ring) or
                                  ONE's + the head split kept by Ulysses (4 e B T C / tp)
"""
import json, sys


def ledger(name, report):
    r = json.load(open(report))
    N, impl, L, B, Tl, C, t = r["cp"], r["cp_impl"], r["L"], r["B"], r["T"], r["C"], r["tp"]
    e, m, rec = r["bytes_per_value"], r["grad_accum"], r["recompute"]
    Ca = C // t
    fwd = 2 if rec != "none" else 1  # selective and full rerun the attention forward in the backward
    want = {}
    if impl == "ring":
        kv = B * Tl * 2 * Ca  # values of one K/V block
        sends = m * L * (N - 1) * (fwd + 1)  # K/V: forward (again when recomputed) + backward
        dkv = m * L * (N - 1)                # dK/dV, FP32
        want["send"] = (sends + dkv, sends * kv * e + dkv * kv * 4)
        want["recv"] = want["send"]
    else:
        s = B * Tl * Ca * e  # one q/k/v/out slice of the rank's tokens
        calls = m * L * 2 * (fwd + 1)
        want["all_to_all"] = (calls, m * L * (4 * fwd + 4) * s)
    want["all_reduce"] = (1, 8)  # the loss's sum over cp (a double as two floats)
    for rk in r["ranks"]:
        rows = {row["kind"]: row for row in rk["ledger_step"]["rows"] if row["group"] == "cp"}
        got = {k: (v["calls"], v["payload_bytes"]) for k, v in rows.items()}
        if got != want:
            return False, "%s: rank %d cp calls and payload per step %s, expected %s" % (name, rk["rank"], got, want)
        sent = sum(v["sent_bytes"] for v in rows.values())
        sent_want = 2.0 * (N - 1) / N * 8
        if impl == "ring":
            sent_want += want["send"][1]
        else:
            sent_want += (N - 1) / N * want["all_to_all"][1]
        if abs(sent - sent_want) > 1.0:
            return False, "%s: rank %d sent %.1f B on cp per step, expected %.1f B" % (name, rk["rank"], sent, sent_want)
    if impl == "ring":
        per = "(N-1) K/V forward, (N-1) K/V + (N-1) dK/dV backward = %d B per layer" % (
            (N - 1) * (2 * e + 4) * B * Tl * 2 * Ca)
    else:
        per = "8 all-to-alls of a q/k/v/out slice, (N-1)/N sent = %.0f B per layer" % ((N - 1) / N * 8 * B * Tl * Ca * e)
    return True, "%s: cp %d %s, recompute %s: per step %s; per layer and micro-batch (no recompute) %s" % (
        name, N, impl, rec, " ".join("%s %d calls %d B" % (k, v[0], v[1]) for k, v in sorted(want.items())), per)


def acts(name, report, one):
    r, o = json.load(open(report)), json.load(open(one))
    N, impl = r["cp"], r["cp_impl"]
    measured = [rk["activations_per_layer_bytes"] for rk in r["ranks"]]
    if any(x != r["paper_activations_per_layer_bytes"] for x in measured):
        return False, "%s: activations per layer %s B measured, formula %.0f B" % (name, measured, r["paper_activations_per_layer_bytes"])
    whole = o["ranks"][0]["activations_per_layer_bytes"]
    extra = 4 * r["bytes_per_value"] * r["B"] * r["T"] * N * r["C"] // r["tp"] if impl == "ulysses" and r["recompute"] == "none" else 0
    fields = 14  # the block's fields and x_in, each rounded up to 64 bytes
    if abs(N * measured[0] - (whole + extra)) > N * fields * 64:
        return False, "%s: %d B per rank x cp %d = %d B, one process %d B (+%d B Ulysses' heads)" % (
            name, measured[0], N, N * measured[0], whole, extra)
    return True, "%s: activations per layer %d B on every rank (formula), x cp %d = %d B vs one process's %d B%s" % (
        name, measured[0], N, N * measured[0], whole, " + %d B of Ulysses' head split" % extra if extra else "")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "ledger":
        good, msg = ledger(*sys.argv[2:4])
    elif cmd == "acts":
        good, msg = acts(*sys.argv[2:5])
    else:
        sys.exit("cp_check.py: unknown command %s" % cmd)
    print(("ok   " if good else "FAIL ") + msg)
    sys.exit(0 if good else 1)
