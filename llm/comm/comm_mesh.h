// comm_mesh.h: starting and ending the processes of the mesh (llm/comm/mesh.h: the layout, its groups and
// the rank order): MPI, the layout checked before anything is allocated, one communicator per group of the
// mesh, one GPU per process, NCCL's communicators, the watchdog's side channel and thread (comm_init,
// wd_set_timeout, comm_free, comm_exit).
#pragma once

#include "comm_types.h"
#if COMM_NCCL
#include "watchdog_nccl.h"  // (it includes watchdog_mpi.h: the side channel)
#elif COMM_MPI
#include "watchdog_mpi.h"
#endif

static inline int comm_group_size(const Comm* c, CommGroup g) { return c->group_size[g]; }
static inline int comm_group_rank(const Comm* c, CommGroup g) { return c->group_rank[g]; }

// the variables a launcher gives each process it starts: the process count (NULL: none given) and the rank (Open MPI's
// mpirun, MPICH's Hydra and PMI, MVAPICH, PMIx launchers such as srun --mpi=pmix)
static const char* const COMM_LAUNCHER_VARS[4][2] = {
    {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"}, {"PMI_SIZE", "PMI_RANK"}, {"MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"},
    {NULL, "PMIX_RANK"}};
#define COMM_LAUNCHERS ((int)(sizeof(COMM_LAUNCHER_VARS) / sizeof(COMM_LAUNCHER_VARS[0])))

#if COMM_MPI
// 1 if a launcher started this process
static int comm_launched(void) {
    for (int i = 0; i < COMM_LAUNCHERS; i++) {
        if (getenv(COMM_LAUNCHER_VARS[i][1]) != NULL) return 1;
    }
    return 0;
}
// A process no launcher started (`./train_gpt_cpu` alone) is an MPI "singleton". Open MPI 4.1 starts one by forking
// a daemon (orted) and its default messaging layer (UCX): MPI_Init 400-630 ms (193-310 over ob1) for a process that
// talks to no other, against 25-43 ms "isolated" (no daemon; such a process could not MPI_Comm_spawn, which nothing
// here does) over ob1 (Open MPI 4.1.4 on this project's 2-core Xeon, 2026-11-29, a loaded machine). Unless the user
// chose otherwise (an OMPI_MCA_ variable already set wins), a lone process starts that way. Other MPIs ignore these
// variables.
static void comm_lone_process_start(void) {
    if (comm_launched()) return;
    setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
    setenv("OMPI_MCA_pml", "ob1", 0);
    setenv("OMPI_MCA_osc", "^ucx", 0);
}
#else
// the launcher's process count when one started this process (Open MPI, MPICH/Hydra, ...), else 1
static inline int comm_launcher_size(int* rank) {
    for (int i = 0; i < COMM_LAUNCHERS; i++) {
        const char* s = COMM_LAUNCHER_VARS[i][0] ? getenv(COMM_LAUNCHER_VARS[i][0]) : NULL;
        if (s != NULL && atoi(s) > 1) {
            const char* r = getenv(COMM_LAUNCHER_VARS[i][1]);
            *rank = r ? atoi(r) : 0;
            return atoi(s);
        }
    }
    *rank = 0;
    return 1;
}
#endif

#if COMM_MPI
// the job's error_end (llm/core/common.h), run after an error line and before its exit: the others' lines
// (wd_error_end), then, over NCCL, the watchdog thread stopped: it calls MPI every 20 ms, and the exit's
// library destructors unload MPI's components under it (seen: a segfault after the error line of a bad layout)
static void comm_error_end(void* ctx) {
    wd_error_end(ctx);
#if COMM_NCCL
    wd_nccl_stop((Comm*)ctx);
#endif
}
#endif

// Start MPI (unless the caller did), check the layout, make the mesh (c->mesh) and build its groups; over
// NCCL also pick the GPU and create the NCCL communicators and the communication stream. Without MPI: one
// process. dp = 0: dp = world size / (tp * pp * cp). ep: the expert-parallel groups, folded into dp (ep divides
// dp; llm/comm/mesh.h). Exits (rank 0 printing one line) on an invalid layout.
static void comm_init(Comm* c, int* argc, char*** argv, int dp, int tp, int pp, int cp = 1, int ep = 1) {
    memset(c, 0, sizeof(*c));
    char err[400] = "";
#if COMM_MPI
    int inited = 0;
    mpiCheck(MPI_Initialized(&inited));
    if (!inited) {
        double t0 = wall_ms();
        int provided = 0;
        comm_lone_process_start();
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
    mesh_layout_error(world, &dp, tp, pp, cp, err, sizeof(err), ep);
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
    } else if (tp < 1 || pp < 1 || cp < 1 || dp < 0 || ep != 1) {
        if (dp == 0) dp = 1;
        mesh_layout_error(world, &dp, tp, pp, cp, err, sizeof(err), ep);
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

    int r = c->world_rank;
    llm_job.rank = c->world_rank;
    llm_job.size = c->world_size;
    int sizes[MESH_NUM_AXES];
    sizes[AXIS_DP] = dp; sizes[AXIS_PP] = pp; sizes[AXIS_CP] = cp; sizes[AXIS_TP] = tp;
    mesh_make(&c->mesh, c->world_size, r, sizes, ep);

#if COMM_MPI
    // one communicator per group of the mesh: color (the group's first world rank) selects the members, key
    // (the rank within the group) orders them; a middle pipeline stage is in no embed group (MPI_COMM_NULL)
    int* members = (int*)mallocCheck((size_t)world * sizeof(int));
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        mesh_group_members(&c->mesh, g, r, members);
        int color = mesh_in_group(&c->mesh, g, r) ? members[0] : MPI_UNDEFINED;
        mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, color, c->mesh.group_rank[g], &c->mpi[g]));
    }
    free(members);
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        c->group_rank[g] = 0;
        c->group_size[g] = 1;
        if (c->mpi[g] == MPI_COMM_NULL) continue;  // a middle stage's embed group: itself alone
        mpiCheck(MPI_Comm_set_errhandler(c->mpi[g], MPI_ERRORS_RETURN));
        mpiCheck(MPI_Comm_rank(c->mpi[g], &c->group_rank[g]));
        mpiCheck(MPI_Comm_size(c->mpi[g], &c->group_size[g]));
    }
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        if (c->group_rank[g] != c->mesh.group_rank[g] || c->group_size[g] != c->mesh.group_size[g]) {
            fprintf(stderr, "error: rank %d: %s group is rank %d of %d, expected %d of %d (%s:%d)\n", r,
                    comm_group_name(g), c->group_rank[g], c->group_size[g], c->mesh.group_rank[g], c->mesh.group_size[g],
                    __FILE__, __LINE__);
            comm_abort_all(EXIT_FAILURE);
        }
    }
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &c->node));
    wd_init(c);  // the watchdog's side channel (off until wd_set_timeout)
    llm_job.error_begin = wd_error_begin;  // error lines every rank sees alike: printed once (llm/core/common.h)
    llm_job.error_end = comm_error_end;
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
        if (g == GROUP_EDP && c->mesh.ep.size == 1) {  // without expert parallelism: GROUP_DP's ranks, in its order
            c->nccl[g] = c->nccl[GROUP_DP];
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
#if COMM_NCCL
    wd_nccl_stop(c);  // (its thread calls MPI: not beside MPI_Finalize)
#endif
#if COMM_MPI
    MPI_Finalize();
#endif
    exit(status);
}
