// pipeline_split.h: where the layers of a pipeline run: the split of the L layers over the schedule's virtual
// stages, each stage's range (embedding, blocks, head) on its rank and chunk, the parameter units a pp rank holds,
// and the layouts refused before anything is allocated (llm/parallel/pipeline.h runs them). (ZeRO-3 with the V:
// the embedding acquired by two stages of rank 0, listed twice in llm/parallel/zero.h's orders.)
//
// The split. The schedule's S = pp_size x vpp virtual stages (vpp chunks per rank, placed by the schedule:
// llm/parallel/schedule_list.h's pipe_owner, s % pp_size as chunk s / pp_size, or the V of zbv and dualpipev;
// the schedules' P and V) take the L layers in order, as evenly as possible: each gets L / S, and the
// first L % S one more. The embedding (a lookup, no matmul) and the head (the final LayerNorm, the LM
// head's matmul and the loss) are not counted as layers: the embedding goes with virtual stage 0, the
// head with S - 1, and since the extra layers go to the first stages, the last stage, which has the
// head, never has more layers than another. The tied token embedding lives on the ranks of the first and
// the last stage: in the loop placement two ranks, which start from the same values, sum their gradients
// over GROUP_EMBED (llm/parallel/dp_step.h: dp_reduce_tied_embedding) and take the same update, so they stay
// identical; in the V both stages are on rank 0, whose one copy gets both gradients (DpConfig.embed_local).
#pragma once
#include "../core/common.h"
#include "../model/stage.h"
#include "schedule.h"

// layers [l0, l1) of virtual stage s of S
static void pipe_stage_layers(int L, int S, int s, int* l0, int* l1) {
    int base = L / S, extra = L % S;
    *l0 = s * base + (s < extra ? s : extra);
    *l1 = *l0 + base + (s < extra ? 1 : 0);
}

static StageRange pipe_stage_range(GPTConfig c, int pp_size, int vpp, int vshape, int pp_rank, int chunk) {
    int S = pp_size * vpp, s = pipe_stage_of(vshape, pp_size, pp_rank, chunk);
    StageRange r;
    pipe_stage_layers(c.num_layers, S, s, &r.first_layer, &r.last_layer);
    r.has_embedding = s == 0;
    r.has_head = s == S - 1;
    r.embed_later = r.has_head && !r.has_embedding && pipe_rank_of(vshape, pp_size, 0) == pp_rank;  // the V's rank 0
    return r;
}

// held (num_units(c)): 1 for the units the chunks of pp rank pp_rank use (the embedding with the first and the last
// stage); vshape: the schedule's placement (schedule_is_v)
static void pipe_held_units(GPTConfig c, int pp_size, int vpp, int vshape, int pp_rank, int* held) {
    for (int u = 0; u < num_units(c); u++) held[u] = 0;
    for (int k = 0; k < vpp; k++) {
        StageRange r = pipe_stage_range(c, pp_size, vpp, vshape, pp_rank, k);
        for (int l = r.first_layer; l < r.last_layer; l++) {  // a moe layer's experts unit with it
            held[unit_of_layer(c, l)] = 1;
            if (layer_is_moe(c, l)) held[unit_experts_of_layer(c, l)] = 1;
        }
        if (r.has_embedding || r.has_head) held[UNIT_EMBED] = 1;
        if (r.has_head) held[unit_final(c)] = 1;
    }
}

// why pp_size ranks x vpp chunks cannot run `schedule` on this model with m micro-batches, or NULL
static const char* pipe_layout_error(GPTConfig c, int pp_size, int vpp, int m, const char* schedule, char* buf, size_t n) {
    if (pp_size < 1 || vpp < 1) { snprintf(buf, n, "--pp %d --vpp %d: expected both >= 1", pp_size, vpp); return buf; }
    if (vpp > 1 && pp_size == 1 && !schedule_is_v(schedule)) {
        snprintf(buf, n, "--vpp %d: interleaving needs a pipeline, expected --pp >= 2", vpp);
        return buf;
    }
    if ((long long)pp_size * vpp > c.num_layers) {
        snprintf(buf, n, "--pp %d x --vpp %d = %d pipeline stages, but the model has %d layers: expected at most one stage "
                 "per layer", pp_size, vpp, pp_size * vpp, c.num_layers);
        return buf;
    }
    return schedule_error(schedule, pp_size, m, vpp, buf, n);
}
