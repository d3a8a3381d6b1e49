// test_fatal.cu: error lines under mpirun (llm/core/common.h's fatal and llm_job): run by test_ckpt_trust.sh as
//   mpirun -np N build/test_fatal_cpu alike|one|each
// alike: every rank fails with the same line (it must be printed once, by rank 0); one: only rank N-1 fails (it
// must print its line, after waiting at most about a second for a lower rank's); each: every rank fails with its
// own line (each is printed). The other ranks of "one" wait in a barrier until mpirun ends them.
#include "../llm/core/common.h"
#include "../llm/comm/comm.h"
#include "../llm/core/usage.h"

static const char* USAGE =
    "[MODE]   (under mpirun -np N; test/test_ckpt_trust.sh runs it)\n"
    "Ends with fatal's error lines under mpirun, for the test of how they are printed:\n"
    "  alike  every rank fails with the same line (printed once, by rank 0) (the default)\n"
    "  one    only rank N-1 fails\n"
    "  each   every rank fails with its own line\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    Comm c;
    comm_init(&c, &argc, &argv, 0, 1, 1);
    const char* mode = argc > 1 ? argv[1] : "alike";
    if (!strcmp(mode, "alike")) fatal("test_fatal: the same line on every rank");
    if (!strcmp(mode, "each")) fatal("test_fatal: the line of rank %d", c.world_rank);
    if (c.world_rank == c.world_size - 1) fatal("test_fatal: the line of rank %d alone", c.world_rank);
    comm_barrier(&c, GROUP_WORLD);  // (never completes: mpirun ends this rank when the last one exits 1)
    return 0;
}
