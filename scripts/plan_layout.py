#!/usr/bin/env python3
"""plan_layout.py: the scale planner's (scripts/plan.py) view of the trainer's layout rules: the model descriptor
(llm/model/tensors.h's gpt_config_from_descriptor), the tensor table and its units, each unit's values on a tp rank,
the split of the layers over pipeline stages (llm/parallel/pipeline_split.h), and the schedule's answers from the
trainer's own simulator (build/pipeline_sim --json 1); the memory kinds' names and the one-line error."""
import functools
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.environ.get("PIPELINE_SIM", os.path.join(ROOT, "build", "pipeline_sim"))
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
    ("router", "E", "C", "norm", "moe", 0),
    ("efcw", "4C", "C", "norm", "experts", 1), ("efcb", "4C", "1", "norm", "experts", 1),
    ("efcprojw", "C", "4C", "norm", "experts", 1), ("efcprojb", "C", "1", "norm", "experts", 1),
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


def unit_values(cfg, kind, tp, ep=1):
    """values of one unit of this kind on one tp rank (tensor_shard_size; the experts replicated over tp) and one ep
    rank (layout_init_pp: an experts unit holds E/ep of the experts)"""
    holds = {"embed": ("embed",), "dense": ("layer", "dense"), "moe": ("layer", "moe"), "experts": ("experts",), "final": ("final",)}[kind]
    n = 0
    for name, r, c, split, hold, ex in TENSORS:
        if hold not in holds:
            continue
        v = dim(cfg, r) * dim(cfg, c) * (cfg["E"] // ep if ex else 1)
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
