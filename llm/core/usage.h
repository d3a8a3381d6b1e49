// usage.h: --help and unknown flags for the project's programs other than the trainer (which has
// llm/train/args.h): the benchmarks and simulators of dev/ and the test programs of test/ and dev/emu/.
//
//   usage_if_help(argc, argv, text)  --help or -h among the arguments: prints "usage: <argv[0]> <text>"
//                                    on stdout and exits 0, before the program does any work (or starts
//                                    MPI: a test meant for mpirun answers --help run on its own)
//   usage_args(argc, argv, text)     the same, then, for a program whose arguments are positional only
//                                    (a seed, a mode, sizes): an argument that looks like a flag ('-'
//                                    then a letter or a second '-'; a negative number does not) is one
//                                    error line naming it and exit 2 -- not a seed of 0 or a silent default
//
// text is the rest of the first line (the arguments) and, on the next lines, what the program does and
// each argument with its default; it ends with a newline. Each program writes its own.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int usage_is_help(const char* a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

static inline void usage_if_help(int argc, char** argv, const char* text) {
    for (int i = 1; i < argc; i++) {
        if (usage_is_help(argv[i])) {
            printf("usage: %s %s", argv[0], text);
            fflush(stdout);
            exit(0);
        }
    }
}

// the one error line of a flag the program does not know, and exit 2 (a usage error)
[[noreturn]] static inline void usage_unknown_flag(char** argv, const char* flag) {
    fprintf(stderr, "error: %s: unknown flag '%s' (see %s --help)\n", argv[0], flag, argv[0]);
    exit(2);
}

static inline void usage_args(int argc, char** argv, const char* text) {
    usage_if_help(argc, argv, text);
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        int letter = (a[1] >= 'a' && a[1] <= 'z') || (a[1] >= 'A' && a[1] <= 'Z');
        if (a[0] == '-' && (letter || a[1] == '-')) usage_unknown_flag(argv, a);
    }
}
