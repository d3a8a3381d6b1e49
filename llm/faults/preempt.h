// preempt.h: saving on preemption. SIGTERM (what Slurm and Kubernetes send some time before they kill a
// job) and SIGINT (Ctrl-C) do not end the run at once: every rank finishes the step in flight, the ranks
// agree that one of them got a signal, the run saves a checkpoint of that step in its format (waiting
// for an asynchronous save in flight first), prints one line and exits with status 128 + the signal's
// number (143 for SIGTERM, 130 for SIGINT). That is the status a shell reports for a process ended by the
// signal, so a scheduler or script that tests for it sees one; the line and the checkpoint say that the
// state was saved, and --resume latest goes on from it with the losses of a run never interrupted. A
// second signal ends the process at once (the same status), without a checkpoint of the step in flight:
// the newest complete one stays the one a resume takes. --save-on-signal 0 keeps the default (the
// signal ends the process at once).
//
// The agreement is one host all-reduce of an int per step (the lowest rank that got a signal, and which),
// bounded by the watchdog like every collective: a signal that reached one rank alone reaches every
// rank's decision at the same step, and a rank that died instead leaves the others a watchdog line,
// never a hang. Under mpirun a signal to mpirun reaches the ranks this way: Open MPI waits
// odls_base_sigkill_timeout seconds (default 1), sends SIGTERM to every rank, and SIGKILLs them as many
// seconds later; give a save that time (mpirun --mca odls_base_sigkill_timeout 60 ..., as docs/ says).
// Slurm's srun signals every task at once and waits KillWait seconds (default 30) before SIGKILL.
#pragma once
#include <signal.h>
#include "../core/common.h"
#include "../comm/comm.h"

// the handler: the first signal is remembered (llm_job.signal, llm/core/common.h), the second ends the process
static void preempt_handler(int sig) {
    if (llm_job.signal != 0) {
        static const char msg[] = "error: a second signal: exiting at once, without a checkpoint of the step in flight\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)w;
        _exit(128 + sig);
    }
    llm_job.signal = sig;
}

// on: the handlers for SIGTERM and SIGINT (system calls interrupted by them restart)
static void preempt_install(int on) {
    if (!on) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = preempt_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        fatal("sigaction: %s (%s:%d)", strerror(errno), __FILE__, __LINE__);
    }
}

// every rank, after a step: the signal received by the lowest rank that got one (0: none yet), that rank in
// *rank. The same answer on every rank.
static int preempt_agree(Comm* c, int* rank) {
    int sig = llm_job.signal;
    int first = comm_host_min(c, sig != 0 ? c->world_rank * 64 + sig : INT_MAX);  // (signal numbers < 64)
    if (first == INT_MAX) return 0;
    *rank = first / 64;
    return first % 64;
}

static const char* preempt_signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal"; }
