// dp_export.h: the whole model's FP32 host arrays (checkpoint order, Psi values each) in and out of
// this rank's data-parallel storage: dp_export / dp_export_floatx gather the parameters and AdamW's
// moments from every rank's part (its blocks under ZeRO, its tp shards, its pipeline stage's units),
// dp_import_params / dp_import_moments / dp_import_floatx keep this rank's part. Through them a
// checkpoint is layout-independent: llm/ckpt/ saves what dp_export gathered and restores a state file
// (a resume, a rollback of llm/faults/health.h) with dp_import_*.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../model/units.h"
#include "../comm/comm.h"
#include "dp.h"

// this rank's part of a packed host array: all of it (DDP), or its blocks (its shard, shard_optim)
static void dp_mine_from_packed(const DataParallel* dp, const float* packed, float* mine) {
    if (!dp->zero.shard_optim) { memcpy(mine, packed, dp->lay.packed_size * sizeof(float)); return; }
    for (int u = 0; u < dp->lay.num_units; u++) {
        memcpy(mine + dp->z.shard_off[u], packed + dp->lay.units[u].start + (size_t)dp_unit_rank(dp, u) * dp->z.block[u],
               dp->z.block[u] * sizeof(float));
    }
}

// the whole packed array from every rank's part (src: device, floatX or float): every rank of the
// group must call it (one all-gather per unit with shard_optim)
static void dp_gather_to_packed(DataParallel* dp, const void* src, int is_floatX, float* packed) {
    size_t esz = is_floatX ? sizeof(floatX) : sizeof(float);
    if (!dp->zero.shard_optim) {
        if (is_floatX) copy_to_host_float(packed, (const floatX*)src, dp->lay.packed_size);
        else copy_to_host(packed, src, dp->lay.packed_size * sizeof(float));
        return;
    }
    cudaStream_t s = llm_ctx.stream;
    for (int u = 0; u < dp->lay.num_units; u++) {
        size_t padded = dp->lay.units[u].padded, block = dp->z.block[u];
        if (padded == 0) continue;  // a unit of another pipeline stage
        void* tmp = device_malloc(padded * esz, MEM_COMM);
        const char* mine = (const char*)src + dp->z.shard_off[u] * esz;
        if (is_floatX) comm_all_gather(dp->comm, dp_unit_group(dp, u), (const floatX*)mine, (floatX*)tmp, block, s);
        else comm_all_gather(dp->comm, dp_unit_group(dp, u), (const float*)mine, (float*)tmp, block, s);
        device_synchronize();
        if (is_floatX) copy_to_host_float(packed + dp->lay.units[u].start, (const floatX*)tmp, padded);
        else copy_to_host(packed + dp->lay.units[u].start, tmp, padded * sizeof(float));
        device_free(tmp);
    }
}

// Sets the parameters (and the FP32 master weights of BF16 builds) from params (Psi FP32, host,
// checkpoint order). exact: 1 when params are the FP32 master values themselves (a state file), 0
// for a checkpoint or a fresh init (the master then starts as the parameters rounded to floatX).
static void dp_import_params(DataParallel* dp, const float* params, int exact) {
    size_t packed_n = dp->lay.packed_size, mine_n = dp_state_size(dp);
    float* packed = (float*)mallocCheck(packed_n * sizeof(float));
    float* mine = (float*)mallocCheck(mine_n * sizeof(float));
    layout_to_packed(&dp->lay, params, packed);
    if (!dp->zero.shard_params) copy_floats_to_device(dp->params, packed, packed_n);
    dp_mine_from_packed(dp, packed, mine);
    if (dp->zero.shard_params) copy_floats_to_device(dp->params_shard, mine, mine_n);
    if (dp->opt.master) {
        if (!exact) for (size_t i = 0; i < mine_n; i++) mine[i] = (float)(floatX)mine[i];
        copy_to_device(dp->opt.master, mine, mine_n * sizeof(float));
    }
    free(packed);
    free(mine);
}

// AdamW's moments m, v (Psi FP32 each, host, checkpoint order) into this rank's part
static void dp_import_moments(DataParallel* dp, const float* m, const float* v) {
    float* packed = (float*)mallocCheck(dp->lay.packed_size * sizeof(float));
    float* mine = (float*)mallocCheck(dp_state_size(dp) * sizeof(float));
    const float* src[2] = {m, v};
    float* dst[2] = {dp->opt.m, dp->opt.v};
    for (int k = 0; k < 2; k++) {
        layout_to_packed(&dp->lay, src[k], packed);
        dp_mine_from_packed(dp, packed, mine);
        copy_to_device(dst[k], mine, dp_state_size(dp) * sizeof(float));
    }
    free(packed);
    free(mine);
}

// packed (this tp rank's shards of this ep rank's experts, host FP32) into the whole model in checkpoint order:
// with tp > 1 the tp group all-gathers the packed shards, with ep > 1 the ep group all-gathers those (every rank of
// both groups must call it), and each rank's shards go to their places (the replicated tensors, and with ep the
// dense ones, are the same on every such rank)
static void dp_pp_to_first_stage(DataParallel* dp, float* ckpt);
static void dp_packed_to_checkpoint(DataParallel* dp, const float* packed, float* ckpt) {
    const ParamLayout* lay = &dp->lay;
    if (lay->tp_size == 1 && lay->ep_size == 1) {
        layout_to_checkpoint(lay, packed, ckpt);
        dp_pp_to_first_stage(dp, ckpt);
        return;
    }
    size_t n = lay->packed_size, tp = (size_t)lay->tp_size, ep = (size_t)lay->ep_size;
    float* dev = (float*)device_malloc((ep * tp + 1) * n * sizeof(float), MEM_COMM);  // (ep, tp, n), then this rank's
    float* all = (float*)mallocCheck(ep * tp * n * sizeof(float));
    float* mine = dev + ep * tp * n;
    copy_to_device(mine, packed, n * sizeof(float));
    float* tp_all = dev + (size_t)lay->ep_rank * tp * n;  // this ep rank's place: the tp group's shards
    comm_all_gather(dp->comm, GROUP_TP, mine, tp_all, n, llm_ctx.stream);
    if (ep > 1) comm_all_gather(dp->comm, GROUP_EP, tp_all, dev, tp * n, llm_ctx.stream);
    device_synchronize();
    copy_to_host(all, dev, ep * tp * n * sizeof(float));
    for (int e = 0; e < (int)ep; e++) {
        for (int r = 0; r < (int)tp; r++) layout_to_checkpoint_rank(lay, r, e, all + ((size_t)e * tp + r) * n, ckpt);
    }
    free(all);
    device_free(dev);
    dp_pp_to_first_stage(dp, ckpt);
}

// Pipeline parallelism: every later stage sends its units (in checkpoint order: the whole Psi array,
// followed by its held flags, U values) to the first stage of its pp group, which copies them into
// ckpt, so the first stage (and world rank 0, which writes checkpoints) ends with the whole model.
// The tied embedding comes from the first stage (the last stage's copy is the same).
static void dp_pp_to_first_stage(DataParallel* dp, float* ckpt) {
    if (dp->pp_size == 1) return;
    const ParamLayout* lay = &dp->lay;
    size_t n = lay->num_parameters, U = (size_t)lay->num_units;
    float* dev = (float*)device_malloc((n + U) * sizeof(float), MEM_COMM);
    float* host = (float*)mallocCheck((n + U) * sizeof(float));
    cudaStream_t s = llm_ctx.stream;
    if (dp->pp_rank > 0) {
        memcpy(host, ckpt, n * sizeof(float));
        for (size_t u = 0; u < U; u++) host[n + u] = (float)lay->units[u].held;
        copy_to_device(dev, host, (n + U) * sizeof(float));
        comm_send(dp->comm, GROUP_PP, dev, n + U, 0, s);
    } else {
        for (int q = 1; q < dp->pp_size; q++) {
            comm_recv(dp->comm, GROUP_PP, dev, n + U, q, s);
            device_synchronize();
            copy_to_host(host, dev, (n + U) * sizeof(float));
            int ts[NUM_TENSORS];
            for (int u = 1; u < (int)U; u++) {  // unit 0, the embedding, is the first stage's own
                if (host[n + u] == 0.0f) continue;
                int k = unit_tensors(lay, u, ts);
                for (int i = 0; i < k; i++) {
                    size_t at = unit_tensor_ckpt_offset(lay, u, ts[i]);
                    memcpy(ckpt + at, host + at, tensor_layer_size(lay->cfg, ts[i]) * sizeof(float));
                }
            }
        }
    }
    device_synchronize();
    free(host);
    device_free(dev);
}

// The parameters the model computes with, as they are (BF16 builds: the master rounded stochastically
// at the last update), FP32 on the host in checkpoint order (Psi). Every rank of the dp and tp groups
// must call it.
static void dp_export_floatx(DataParallel* dp, float* params) {
    float* packed = (float*)mallocCheck(dp->lay.packed_size * sizeof(float));
    if (!dp->zero.shard_params) copy_to_host_float(packed, dp->params, dp->lay.packed_size);  // every rank has them all
    else dp_gather_to_packed(dp, dp->params_shard, 1, packed);
    dp_packed_to_checkpoint(dp, packed, params);
    free(packed);
}

// The whole model's parameters (the FP32 master weights in BF16 builds, else those of dp_export_floatx)
// and moments, FP32 on the host in checkpoint order (Psi each; m and v may be NULL). Every rank of the
// dp and tp groups must call it.
static void dp_export(DataParallel* dp, float* params, float* m, float* v) {
    float* packed = (float*)mallocCheck(dp->lay.packed_size * sizeof(float));
    if (dp->opt.master) {
        dp_gather_to_packed(dp, dp->opt.master, 0, packed);
        dp_packed_to_checkpoint(dp, packed, params);
    } else {
        dp_export_floatx(dp, params);
    }
    float* dst[2] = {m, v};
    const float* src[2] = {dp->opt.m, dp->opt.v};
    for (int k = 0; k < 2; k++) {
        if (dst[k] == NULL) continue;
        dp_gather_to_packed(dp, src[k], 0, packed);
        dp_packed_to_checkpoint(dp, packed, dst[k]);
    }
    free(packed);
}

// sets the parameters the model computes with to params (Psi FP32 values that floatX holds exactly,
// checkpoint order), leaving the master weights as they are (a resumed BF16 run)
static void dp_import_floatx(DataParallel* dp, const float* params) {
    float* packed = (float*)mallocCheck(dp->lay.packed_size * sizeof(float));
    layout_to_packed(&dp->lay, params, packed);
    if (!dp->zero.shard_params) {
        copy_floats_to_device(dp->params, packed, dp->lay.packed_size);
    } else {
        float* mine = (float*)mallocCheck(dp->z.shard_size * sizeof(float));
        dp_mine_from_packed(dp, packed, mine);
        copy_floats_to_device(dp->params_shard, mine, dp->z.shard_size);
        free(mine);
    }
    free(packed);
}
