#!/usr/bin/env python3
"""plan_time.py: the cluster presets and the time model of the scale planner: model FLOPs per step, the link tier a
group's ring crosses (the mesh's rank order, llm/comm/mesh.h), and the ring cost of a ledger row."""
from plan_layout import num_parameters, unit_kinds, unit_values


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
    elif group == "ep":  # ep consecutive dp ranks (dp_rank = edp_rank x ep + ep_rank)
        span = (a["ep"] - 1) * strides["dp"] + 1
    elif group == "edp":  # the same ep_rank in every ep group, and every cp rank
        span = (a["dp"] // a["ep"] - 1) * a["ep"] * strides["dp"] + (a["cp"] - 1) * strides["cp"] + 1
    elif group == "world":
        span = a["world"]
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
