// comm_mesh.h: the process mesh: the dp x pp x cp x tp layout of the ranks, the groups, and starting and
// ending the processes (MPI, one GPU per process, NCCL's communicators, the watchdog's side channel and
// thread: comm_init, wd_set_timeout, comm_free, comm_exit).
//
// The mesh. World size = dp * pp * cp * tp. Rank order puts tp innermost (the ranks of a Megatron tensor-
// parallel group are consecutive, so they share a node and its NVLink: Shoeybi et al. 2019,
// "Megatron-LM", sec. 3, and Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
// on GPU Clusters", sec. 3.3), then cp (context parallelism talks in every layer too -- ring attention's
// K/V blocks, Ulysses' all-to-alls -- so it comes next to tp, on the same node while tp x cp fits one;
// Megatron's order is tp-cp-dp-pp for the same reason), then pp, then dp:
//
//     world_rank = ((dp_rank * pp + pp_rank) * cp + cp_rank) * tp + tp_rank
//
// Six groups are built once with MPI_Comm_split:
//     GROUP_WORLD  every rank
//     GROUP_DP     the ranks with my (pp_rank, tp_rank), ordered by dp_rank * cp + cp_rank: the gradient
//                  group (DDP, ZeRO). Context parallelism splits a micro-batch's tokens, not the weights,
//                  so each cp rank holds a partial gradient of the same weights, reduced (averaged: the
//                  ranks' losses are means over equally many tokens) with the dp replicas, and ZeRO shards
//                  over dp x cp ranks (Megatron's data-parallel group "with cp"). The data itself is split
//                  over dp only: dp_rank picks the batch, the cp ranks of one dp rank read the same one.
//     GROUP_TP     the ranks with my (dp_rank, pp_rank, cp_rank), ordered by tp_rank   (Megatron)
//     GROUP_PP     the ranks with my (dp_rank, cp_rank, tp_rank), ordered by pp_rank   (pipeline P2P)
//     GROUP_EMBED  the first and the last pipeline stage with my (dp_rank, cp_rank, tp_rank): the two
//                  copies of the tied token embedding, whose gradients are summed (llm/parallel/pipeline.h);
//                  a middle stage is a group of one it never uses, and with pp = 1 it is the rank itself
//     GROUP_CP     the ranks with my (dp_rank, pp_rank, tp_rank), ordered by cp_rank: the sequence's
//                  chunks (ring attention's ring, Ulysses' all-to-alls: llm/parallel/context_parallel.h)
// "rank" and "root"/"peer" arguments of the collectives are ranks within the named group.
#pragma once

#include "comm_types.h"
#if COMM_NCCL
#include "watchdog_nccl.h"  // (it includes watchdog_mpi.h: the side channel)
#elif COMM_MPI
#include "watchdog_mpi.h"
#endif

static inline int comm_world_rank_of(const Comm* c, int dp_rank, int pp_rank, int cp_rank, int tp_rank) {
    return ((dp_rank * c->pp + pp_rank) * c->cp + cp_rank) * c->tp + tp_rank;
}
static inline int comm_group_size(const Comm* c, CommGroup g) { return c->group_size[g]; }
static inline int comm_group_rank(const Comm* c, CommGroup g) { return c->group_rank[g]; }

// the layout error for dp x tp x pp x cp on `world` processes, or "" (dp = 0 is resolved in *dp)
static void comm_layout_error(int world, int* dp, int tp, int pp, int cp, char* err, size_t cap) {
    err[0] = '\0';
    char model[48];  // the model-parallel ranks one dp replica needs
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
        }
    }
}

#if !COMM_MPI
// the launcher's process count when one started this process (Open MPI, MPICH/Hydra, ...), else 1
static inline int comm_launcher_size(int* rank) {
    const char* size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    const char* rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK"};
    for (int i = 0; i < 3; i++) {
        const char* s = getenv(size_vars[i]);
        if (s != NULL && atoi(s) > 1) {
            const char* r = getenv(rank_vars[i]);
            *rank = r ? atoi(r) : 0;
            return atoi(s);
        }
    }
    *rank = 0;
    return 1;
}
#endif

// Start MPI (unless the caller did), check the layout, build the groups; over NCCL also pick the
// GPU and create the NCCL communicators and the communication stream. Without MPI: one process.
// dp = 0: dp = world size / (tp * pp * cp). Exits (rank 0 printing one line) on an invalid layout.
static void comm_init_mesh(Comm* c, int* argc, char*** argv, int dp, int tp, int pp, int cp) {
    memset(c, 0, sizeof(*c));
    char err[400] = "";
#if COMM_MPI
    int inited = 0;
    mpiCheck(MPI_Initialized(&inited));
    if (!inited) {
        double t0 = wall_ms();
        int provided = 0;
        // funneled: only the main thread calls MPI (OpenMP threads never do); NCCL builds ask for
        // multiple, so that the watchdog thread can use its side channel (llm/comm/watchdog.h)
        mpiCheck(MPI_Init_thread(argc, argv, COMM_NCCL ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, &provided));
        c->init_ms = wall_ms() - t0;
        c->owns_mpi = 1;
    }
    // errors come back to mpiCheck, which names the file:line, instead of aborting inside MPI
    mpiCheck(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &c->world_size));
    int world = c->world_size;

    // the layout, before anything is allocated
    comm_layout_error(world, &dp, tp, pp, cp, err, sizeof(err));
    if (err[0]) {
        if (c->world_rank == 0) {
            fprintf(stderr, "error: %s\n", err);
            fflush(stderr);
        }
        MPI_Finalize();  // every rank gets here (same arguments), then all exit non-zero
        exit(EXIT_FAILURE);
    }
#else
    // one process: refuse a launch of several, and any layout of more than one
    (void)argc; (void)argv;
    int launched_rank = 0, launched = comm_launcher_size(&launched_rank);
    const int world = 1;
    if (launched > 1) {
        snprintf(err, sizeof(err), "this program was built without MPI and runs as one process, but the launcher "
                 "started %d (mpirun -np %d): rebuild with MPI (libopenmpi-dev) and NCCL for more", launched, launched);
    } else if (tp < 1 || pp < 1 || cp < 1 || dp < 0) {
        comm_layout_error(world, &dp, tp, pp, cp, err, sizeof(err));
    } else if ((long long)(dp > 0 ? dp : 1) * tp * pp * cp != 1) {
        char layout[80];
        if (dp > 0) snprintf(layout, sizeof(layout), "--dp %d x --tp %d x --pp %d", dp, tp, pp);
        else snprintf(layout, sizeof(layout), "--tp %d x --pp %d", tp, pp);
        if (cp > 1) snprintf(layout + strlen(layout), sizeof(layout) - strlen(layout), " x --cp %d", cp);
        snprintf(err, sizeof(err), "invalid layout: %s asks for more than one process, but this program was built "
                 "without MPI and runs as one process (rebuild with MPI and NCCL for more)", layout);
    } else {
        dp = 1;
    }
    if (err[0]) {
        if (launched_rank == 0) {
            fprintf(stderr, "error: %s\n", err);
            fflush(stderr);
        }
        exit(EXIT_FAILURE);
    }
    c->world_rank = 0;
    c->world_size = 1;
#endif

    c->dp = dp; c->tp = tp; c->pp = pp; c->cp = cp;
    int r = c->world_rank;
    llm_job.rank = c->world_rank;
    llm_job.size = c->world_size;
    c->tp_rank = r % tp;
    c->cp_rank = (r / tp) % cp;
    c->pp_rank = (r / (tp * cp)) % pp;
    c->dp_rank = r / (tp * cp * pp);

#if COMM_MPI
    // the groups: color selects the members, key orders them
    mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi[GROUP_WORLD]));
    int dpcp_rank = c->dp_rank * cp + c->cp_rank;  // my rank in the gradient group
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, c->pp_rank * tp + c->tp_rank, dpcp_rank, &c->mpi[GROUP_DP]));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, (c->dp_rank * pp + c->pp_rank) * cp + c->cp_rank, c->tp_rank, &c->mpi[GROUP_TP]));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, dpcp_rank * tp + c->tp_rank, c->pp_rank, &c->mpi[GROUP_PP]));
    int end_stage = c->pp_rank == 0 || c->pp_rank == pp - 1;  // the stages holding the token embedding
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, end_stage ? dpcp_rank * tp + c->tp_rank : MPI_UNDEFINED, c->pp_rank,
                            &c->mpi[GROUP_EMBED]));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, (c->dp_rank * pp + c->pp_rank) * tp + c->tp_rank, c->cp_rank, &c->mpi[GROUP_CP]));
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        c->group_rank[g] = 0;
        c->group_size[g] = 1;
        if (c->mpi[g] == MPI_COMM_NULL) continue;  // a middle stage's embed group: itself alone
        mpiCheck(MPI_Comm_set_errhandler(c->mpi[g], MPI_ERRORS_RETURN));
        mpiCheck(MPI_Comm_rank(c->mpi[g], &c->group_rank[g]));
        mpiCheck(MPI_Comm_size(c->mpi[g], &c->group_size[g]));
    }
    const int want_rank[COMM_NUM_GROUPS] = {c->world_rank, dpcp_rank, c->tp_rank, c->pp_rank,
                                            c->pp_rank == pp - 1 && pp > 1 ? 1 : 0, c->cp_rank};
    const int want_size[COMM_NUM_GROUPS] = {world, dp * cp, tp, pp, end_stage && pp > 1 ? 2 : 1, cp};
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        if (c->group_rank[g] != want_rank[g] || c->group_size[g] != want_size[g]) {
            fprintf(stderr, "error: rank %d: %s group is rank %d of %d, expected %d of %d (%s:%d)\n", r,
                    comm_group_name(g), c->group_rank[g], c->group_size[g], want_rank[g], want_size[g],
                    __FILE__, __LINE__);
            comm_abort_all(EXIT_FAILURE);
        }
    }
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &c->node));
    wd_init(c);  // the watchdog's side channel (off until wd_set_timeout)
    llm_job.error_begin = wd_error_begin;  // error lines every rank sees alike: printed once (llm/core/common.h)
    llm_job.error_end = wd_error_end;
    llm_job.ctx = c;
    mpiCheck(MPI_Comm_rank(c->node, &c->local_rank));
    mpiCheck(MPI_Comm_size(c->node, &c->local_size));
#else
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        c->group_rank[g] = 0;
        c->group_size[g] = 1;
    }
    c->local_rank = 0;
    c->local_size = 1;
#endif

#if LLM_HAS_KERNELS
    // one GPU per process, chosen by the node-local rank
    int ndev = 0;
    cudaCheck(cudaGetDeviceCount(&ndev));
    if (ndev < 1 || c->local_size > ndev) {
        if (c->local_rank == 0) {
            fprintf(stderr, "error: %d processes on this node but %d GPUs: one GPU per process is needed%s\n",
                    c->local_size, ndev, LLM_BUILD_EMU ? " (emulated: set EMU_DEVICES)" : "");
            fflush(stderr);
        }
        exit(EXIT_FAILURE);
    }
    c->device = c->local_rank % ndev;
    cudaCheck(cudaSetDevice(c->device));
#endif
#if COMM_NCCL
    cudaCheck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&c->begin_event, cudaEventDisableTiming));
    for (int i = 0; i < COMM_NUM_EVENTS; i++) {
        // with timing: comm_take_wait_ms reads them (recording costs about the same)
        cudaCheck(cudaEventCreateWithFlags(&c->done_events[i], cudaEventDefault));
        cudaCheck(cudaEventCreateWithFlags(&c->ready_events[i], cudaEventDefault));
    }
    // one NCCL communicator per group: its rank 0 makes the id, the group's MPI communicator carries
    // it. Groups of one rank need none (their collectives are local copies); a group as large as the
    // world is the world. All ranks walk the groups in the same order, so the blocking inits match.
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        c->nccl[g] = NULL;
        c->nccl_owned[g] = 0;
        if (c->group_size[g] == 1) continue;
        if (g != GROUP_WORLD && c->group_size[g] == world) {
            c->nccl[g] = c->nccl[GROUP_WORLD];
            continue;
        }
        ncclUniqueId id;
        if (c->group_rank[g] == 0) ncclCheck(ncclGetUniqueId(&id));
        mpiCheck(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, c->mpi[g]));
        // non-blocking: no NCCL call can block the host past the watchdog (llm/comm/watchdog.h)
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclResult_t r = ncclCommInitRankConfig(&c->nccl[g], c->group_size[g], id, c->group_rank[g], &config);
        nccl_settle(c->nccl[g], r, __FILE__, __LINE__);
        c->nccl_owned[g] = 1;
    }
#endif
}

// the mesh without context parallelism (cp = 1)
static void comm_init(Comm* c, int* argc, char*** argv, int dp, int tp, int pp) { comm_init_mesh(c, argc, argv, dp, tp, pp, 1); }

// --comm-timeout: 0 turns the watchdog off; reports start after a fifth of it (at most 1 s). Over
// NCCL (more than one process) it starts the watchdog thread.
static void wd_set_timeout(Comm* c, double timeout_s) {
    c->wd.timeout_s = timeout_s;
    c->wd.report_s = timeout_s / 5 < 1.0 ? timeout_s / 5 : 1.0;
#if COMM_NCCL
    if (timeout_s > 0.0 && c->world_size > 1 && c->wd.nccl == NULL) wd_nccl_start(c);
#endif
}

static void comm_free(Comm* c) {
#if COMM_NCCL
    wd_nccl_stop(c);
    cudaCheck(cudaStreamSynchronize(c->stream));
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        if (c->nccl_owned[g]) {
            nccl_settle(c->nccl[g], ncclCommFinalize(c->nccl[g]), __FILE__, __LINE__);  // flushes its work
            ncclCheck(ncclCommDestroy(c->nccl[g]));
        }
        c->nccl[g] = NULL;
    }
    for (int i = 0; i < COMM_NUM_EVENTS; i++) {
        cudaCheck(cudaEventDestroy(c->done_events[i]));
        cudaCheck(cudaEventDestroy(c->ready_events[i]));
    }
    cudaCheck(cudaEventDestroy(c->begin_event));
    cudaCheck(cudaStreamDestroy(c->stream));
#endif
#if COMM_MPI
    wd_free(c);
    mpiCheck(MPI_Comm_free(&c->node));
    for (int g = 0; g < COMM_NUM_GROUPS; g++) if (c->mpi[g] != MPI_COMM_NULL) mpiCheck(MPI_Comm_free(&c->mpi[g]));
    if (c->owns_mpi) mpiCheck(MPI_Finalize());
#endif
    c->owns_mpi = 0;
}

// Every rank calls it together (same arguments, e.g. after rank 0 printed why): finalize MPI and
// exit with status. For an error seen by one rank alone use comm_abort_all.
[[noreturn]] static inline void comm_exit(Comm* c, int status) {
    (void)c;
    fflush(stdout);
    fflush(stderr);
#if COMM_MPI
    MPI_Finalize();
#endif
    exit(status);
}
