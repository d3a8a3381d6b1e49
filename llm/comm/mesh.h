// mesh.h: the process mesh, one value: for each axis of the layout (dp, pp, cp, tp) its size, this rank's
// coordinate and its group, the rank order written once, the gradient group, and the groups as the sets of
// axes they span. Arithmetic only, the same on every rank and in every build: llm/comm/comm_mesh.h builds the
// communicators from it, and every part of the trainer takes its sizes and ranks from it at init.
//
// The axes, outermost first (MESH_AXES below; one row each). World size = dp * pp * cp * tp, and
//
//     world_rank = ((dp_rank * pp_size + pp_rank) * cp_size + cp_rank) * tp_size + tp_rank
//
// tp is innermost: the ranks of a Megatron tensor-parallel group are consecutive, so they share a node and
// its NVLink (Shoeybi et al. 2019, "Megatron-LM", sec. 3; Narayanan et al. 2021, "Efficient Large-Scale
// Language Model Training on GPU Clusters", sec. 3.3). cp comes next: context parallelism talks in every
// layer too (ring attention's K/V blocks, Ulysses' all-to-alls), so it shares the node while tp x cp fits
// one (Megatron's order is tp-cp-dp-pp for the same reason). Then pp (one P2P message per micro-batch and
// stage boundary), then dp (once per step, overlapped with the backward).
//
// The groups (CommGroup): each is the ranks that share every coordinate but those of its axes, ordered by
// those coordinates in the rank order (MESH_GROUPS below; one row each):
//     GROUP_WORLD  every axis
//     GROUP_DP     dp and cp: the gradient group of the dense parameters (DDP averages over it, ZeRO shards
//                  over it). Context parallelism splits a micro-batch's tokens, not the weights, so each cp
//                  rank holds a partial gradient of the same weights, averaged with the dp replicas (the
//                  ranks' losses are means over equally many tokens): Megatron's data-parallel group "with
//                  cp". Its place is mesh.grad; the batch itself is split over dp alone (mesh.dp's
//                  coordinate picks it, the cp ranks of one dp rank read the same one), and nothing talks
//                  over dp alone, so the dp axis has no group of its own (GROUP_NONE).
//     GROUP_TP     tp (Megatron's f and g, sequence parallelism's gathers and scatters)
//     GROUP_PP     pp (the pipeline's P2P, the loss sent from the last stage)
//     GROUP_EMBED  pp, its two ends only: the first and the last stage, which hold the two copies of the tied
//                  token embedding and sum their gradients (llm/parallel/dp_step.h); a middle stage, and any
//                  stage when pp = 1, is a group of one it never uses
//     GROUP_CP     cp (ring attention's ring, Ulysses' all-to-alls: llm/sharded/context_parallel.h)
//     GROUP_EP     expert parallelism (--ep, llm/sharded/expert_parallel.h): a fold of the dp axis, not an axis of
//                  its own. Megatron-Core's "parallel folding" (Liu et al. 2025, "MoE Parallel Folding"): the
//                  experts are split over ranks that already exist, those of the dp axis, so ep multiplies no
//                  process count. The dp coordinate splits as dp_rank = edp_rank * ep + ep_rank: the ep ranks of
//                  one group are consecutive dp ranks (the nearest in the rank order after tp, cp and pp: the
//                  two all-to-alls of every moe layer cross the fewest links). Each holds E/ep experts.
//     GROUP_EDP    the gradient group of the experts' parameters: the ranks that hold the same experts (same
//                  ep_rank, and every cp rank: cp splits tokens, as for the dense parameters), edp x cp, of
//                  size dp x cp / ep. DDP averages an experts unit over it and ZeRO shards it over it
//                  (llm/parallel/dp.h). With ep = 1 it is GROUP_DP's ranks.
// The "rank" and "root"/"peer" arguments of the collectives are ranks within the named group.
//
// Naming (docs/architecture.md): an axis's size and this rank's coordinate are `mesh.tp.size` and
// `mesh.tp.rank`, or `tp_size` and `tp_rank` where they are copied out; a single letter is a tensor's dim.
#pragma once

#include "../core/common.h"
#include <stddef.h>

typedef enum {
    GROUP_NONE = -2,  // no group (the dp axis: see above)
    GROUP_ALL = -1,   // every group (the ledger's queries)
    GROUP_WORLD = 0, GROUP_DP = 1, GROUP_TP = 2, GROUP_PP = 3, GROUP_EMBED = 4, GROUP_CP = 5, GROUP_EP = 6, GROUP_EDP = 7
} CommGroup;
#define COMM_NUM_GROUPS 8

// one axis of the mesh as this rank sees it
typedef struct {
    int size;         // ranks along the axis
    int rank;         // this rank's coordinate on it, 0 .. size-1
    CommGroup group;  // the ranks that differ from this one on this axis alone (GROUP_NONE: not built)
} MeshAxis;

typedef struct {
    MeshAxis dp, pp, cp, tp;  // the axes (MESH_AXES: their order)
    MeshAxis grad;            // the gradient group of the dense parameters, dp x cp: size, this rank's place, GROUP_DP
    MeshAxis ep;              // expert parallelism, folded into dp: size (divides dp.size), dp.rank % size, GROUP_EP
    MeshAxis egrad;           // the experts' gradient group, edp x cp: size dp x cp / ep, this rank's place, GROUP_EDP
    int world_size, world_rank;
    int group_size[COMM_NUM_GROUPS], group_rank[COMM_NUM_GROUPS];  // of this rank's group of each kind
} Mesh;

// The axes, outermost first: the rank order. Adding an axis is a field of Mesh, a row here, its group.
enum { AXIS_DP = 0, AXIS_PP, AXIS_CP, AXIS_TP, MESH_NUM_AXES };
typedef struct {
    const char* name;  // "dp": also its flag, --dp
    size_t field;      // offsetof(Mesh, dp)
    CommGroup group;   // the group along it alone
} MeshAxisRow;
static const MeshAxisRow MESH_AXES[MESH_NUM_AXES] = {
    {"dp", offsetof(Mesh, dp), GROUP_NONE},
    {"pp", offsetof(Mesh, pp), GROUP_PP},
    {"cp", offsetof(Mesh, cp), GROUP_CP},
    {"tp", offsetof(Mesh, tp), GROUP_TP},
};

// The groups: the axes each spans (bit a: MESH_AXES[a]), for the embed group its ends only, and for the two
// groups of expert parallelism the part of the dp coordinate they span (the fold: dp_rank = edp_rank * ep + ep_rank).
#define MESH_AXIS_BIT(a) (1u << (a))
enum { FOLD_NONE = 0, FOLD_EP = 1, FOLD_EDP = 2 };
typedef struct {
    const char* name;  // in the ledger, the report and the watchdog's lines
    unsigned axes;
    int ends_only;     // 1: only the first and the last coordinate of its one axis belong (a middle one: alone)
    int fold;          // FOLD_EP: only the ep part of the dp coordinate varies; FOLD_EDP: only the edp part
} MeshGroupRow;
static const MeshGroupRow MESH_GROUPS[COMM_NUM_GROUPS] = {
    {"world", (1u << MESH_NUM_AXES) - 1, 0, FOLD_NONE},                      // GROUP_WORLD
    {"dp", MESH_AXIS_BIT(AXIS_DP) | MESH_AXIS_BIT(AXIS_CP), 0, FOLD_NONE},  // GROUP_DP: the gradient group
    {"tp", MESH_AXIS_BIT(AXIS_TP), 0, FOLD_NONE},                           // GROUP_TP
    {"pp", MESH_AXIS_BIT(AXIS_PP), 0, FOLD_NONE},                           // GROUP_PP
    {"embed", MESH_AXIS_BIT(AXIS_PP), 1, FOLD_NONE},                        // GROUP_EMBED
    {"cp", MESH_AXIS_BIT(AXIS_CP), 0, FOLD_NONE},                           // GROUP_CP
    {"ep", MESH_AXIS_BIT(AXIS_DP), 0, FOLD_EP},                             // GROUP_EP
    {"edp", MESH_AXIS_BIT(AXIS_DP) | MESH_AXIS_BIT(AXIS_CP), 0, FOLD_EDP},  // GROUP_EDP: the experts' gradient group
};

// 1 when dp coordinates a and b are in one group of fold `fold` (ep ranks per group: ep)
static inline int mesh_fold_match(int fold, int ep, int a, int b) {
    if (fold == FOLD_EP) return a / ep == b / ep;
    if (fold == FOLD_EDP) return a % ep == b % ep;
    return 1;
}

static inline const char* comm_group_name(int g) { return (g >= 0 && g < COMM_NUM_GROUPS) ? MESH_GROUPS[g].name : "all"; }

static inline MeshAxis* mesh_axis(Mesh* m, int a) { return (MeshAxis*)((char*)m + MESH_AXES[a].field); }
static inline const MeshAxis* mesh_axis_c(const Mesh* m, int a) { return (const MeshAxis*)((const char*)m + MESH_AXES[a].field); }

// the coordinate on axis a of world rank r (any rank, not only this one)
static inline int mesh_coord(const Mesh* m, int r, int a) {
    int stride = 1;
    for (int b = MESH_NUM_AXES - 1; b > a; b--) stride *= mesh_axis_c(m, b)->size;
    return (r / stride) % mesh_axis_c(m, a)->size;
}

// the world rank of the coordinates coord[MESH_NUM_AXES]: the rank order
static inline int mesh_world_rank(const Mesh* m, const int* coord) {
    int r = 0;
    for (int a = 0; a < MESH_NUM_AXES; a++) r = r * mesh_axis_c(m, a)->size + coord[a];
    return r;
}

// The world ranks of the group g that world rank r belongs to, in group order, into out (world_size ints);
// returns how many. The order: the group's coordinates with the outer axis first (GROUP_DP: dp_rank * cp_size
// + cp_rank), the order in which comm_mesh.h ranks the communicator.
static int mesh_group_members(const Mesh* m, int g, int r, int* out) {
    int coord[MESH_NUM_AXES], n = 0;
    for (int a = 0; a < MESH_NUM_AXES; a++) coord[a] = mesh_coord(m, r, a);
    unsigned axes = MESH_GROUPS[g].axes;
    if (MESH_GROUPS[g].ends_only) {  // (one axis) a middle coordinate, or an axis of one: the rank alone
        int a = 0;
        while (!(axes & MESH_AXIS_BIT(a))) a++;
        int last = mesh_axis_c(m, a)->size - 1;
        if (last == 0 || (coord[a] != 0 && coord[a] != last)) { out[0] = r; return 1; }
        coord[a] = 0;
        out[n++] = mesh_world_rank(m, coord);
        coord[a] = last;
        out[n++] = mesh_world_rank(m, coord);
        return n;
    }
    // every combination of the group's coordinates, the innermost axis fastest: an odometer (a folded group
    // keeps the dp coordinates of its fold only)
    int fold = MESH_GROUPS[g].fold, ep = m->ep.size > 0 ? m->ep.size : 1, my_dp = coord[AXIS_DP];
    for (int a = 0; a < MESH_NUM_AXES; a++) if (axes & MESH_AXIS_BIT(a)) coord[a] = 0;
    for (;;) {
        if (mesh_fold_match(fold, ep, coord[AXIS_DP], my_dp)) out[n++] = mesh_world_rank(m, coord);
        int a = MESH_NUM_AXES - 1;
        for (; a >= 0; a--) {
            if (!(axes & MESH_AXIS_BIT(a))) continue;
            if (++coord[a] < mesh_axis_c(m, a)->size) break;
            coord[a] = 0;
        }
        if (a < 0) return n;
    }
}

// 0 when world rank r is in no group g at all: a middle coordinate of an ends_only group (a middle pipeline
// stage has no embed group; the watchdog and the communicators treat it as itself alone)
static inline int mesh_in_group(const Mesh* m, int g, int r) {
    if (!MESH_GROUPS[g].ends_only) return 1;
    int a = 0;
    while (!(MESH_GROUPS[g].axes & MESH_AXIS_BIT(a))) a++;
    int k = mesh_coord(m, r, a);
    return k == 0 || k == mesh_axis_c(m, a)->size - 1;
}

// world rank r's rank within its group g, and the group's size
static void mesh_group_place(const Mesh* m, int g, int r, int* rank, int* size) {
    int* members = (int*)mallocCheck((size_t)m->world_size * sizeof(int));
    *size = mesh_group_members(m, g, r, members);
    *rank = 0;
    for (int i = 0; i < *size; i++) if (members[i] == r) *rank = i;
    free(members);
}

// The mesh of world rank `rank` of `world` ranks with the axes' sizes size[MESH_NUM_AXES] and ep ranks per
// expert-parallel group (checked by mesh_layout_error: the product of the sizes is world, ep divides dp).
static void mesh_make(Mesh* m, int world, int rank, const int* size, int ep = 1) {
    memset(m, 0, sizeof(*m));
    m->world_size = world;
    m->world_rank = rank;
    m->ep.size = ep;
    m->ep.group = GROUP_EP;
    for (int a = 0; a < MESH_NUM_AXES; a++) {
        MeshAxis* x = mesh_axis(m, a);
        x->size = size[a];
        x->group = MESH_AXES[a].group;
    }
    for (int a = 0; a < MESH_NUM_AXES; a++) mesh_axis(m, a)->rank = mesh_coord(m, rank, a);
    for (int g = 0; g < COMM_NUM_GROUPS; g++) mesh_group_place(m, g, rank, &m->group_rank[g], &m->group_size[g]);
    m->grad.size = m->group_size[GROUP_DP];
    m->grad.rank = m->group_rank[GROUP_DP];
    m->grad.group = GROUP_DP;
    m->ep.rank = m->group_rank[GROUP_EP];
    m->egrad.size = m->group_size[GROUP_EDP];
    m->egrad.rank = m->group_rank[GROUP_EDP];
    m->egrad.group = GROUP_EDP;
}

// The layout error of dp x tp x pp x cp on `world` processes into err, or "" (dp = 0 is resolved in *dp:
// the world size over the other axes).
static void mesh_layout_error(int world, int* dp, int tp, int pp, int cp, char* err, size_t cap, int ep = 1) {
    err[0] = '\0';
    char model[64];  // the model-parallel ranks one dp replica needs (three ints of up to 11 characters fit)
    if (cp == 1) snprintf(model, sizeof(model), "--tp %d x --pp %d", tp, pp);
    else snprintf(model, sizeof(model), "--tp %d x --pp %d x --cp %d", tp, pp, cp);
    long long per = (long long)tp * pp * cp;
    if (tp < 1 || pp < 1 || cp < 1 || *dp < 0) {
        snprintf(err, cap, "invalid layout --dp %d --tp %d --pp %d --cp %d: expected tp >= 1, pp >= 1, cp >= 1, "
                 "dp >= 0 (0 = world size / (tp*pp*cp))", *dp, tp, pp, cp);
    } else if (*dp == 0 && world % per != 0) {
        snprintf(err, cap, "invalid layout: %s = %lld must divide the world size, "
                 "found a world size of %d (mpirun -np)", model, per, world);
    } else {
        if (*dp == 0) *dp = (int)(world / per);
        long long want = (long long)*dp * per;
        if (want != world) {
            snprintf(err, cap, "invalid layout: --dp %d x %s = %lld processes "
                     "expected, found a world size of %d (mpirun -np)", *dp, model, want, world);
        } else if (ep < 1 || *dp % ep != 0) {  // (folded into dp: llm/sharded/expert_parallel.h)
            snprintf(err, cap, "invalid layout: --ep %d: expected a divisor of the dp size %d (expert parallelism "
                     "splits the experts over dp ranks)", ep, *dp);
        }
    }
}

// "dp 1 pp 0 cp 0 tp 1": world rank r's coordinates, for labels (the trace's process names)
static void mesh_coords_label(const Mesh* m, int r, char* buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int a = 0; a < MESH_NUM_AXES && used < cap; a++) {
        int k = snprintf(buf + used, cap - used, "%s%s %d", a ? " " : "", MESH_AXES[a].name, mesh_coord(m, r, a));
        if (k < 0) break;
        used += (size_t)k;
    }
}
