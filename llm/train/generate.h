// generate.h: generation mode's input and output (train_gpt.cu's generate, --generate N): the prompt's token ids
// from --prompt-tokens ("id,id,..." or a file of ids separated by commas or white space), checked against the
// model before anything is allocated, and the text printed: the prompt and its continuation decoded with the
// tokenizer file, or their ids where there is none. Turning text into ids is scripts/prompt.py's (GPT-2's
// byte-pair encoding, or the tokens of a character-level tokenizer file): this program only decodes.
#pragma once
#include <ctype.h>
#include <errno.h>
#include "../core/common.h"
#include "tokenizer.h"

// the text of --prompt-tokens: the value itself when it holds only digits, commas and white space, else the file
// it names (malloc'd, NUL-terminated)
static char* prompt_text(const char* spec) {
    int is_list = spec[0] != '\0';
    for (const char* p = spec; *p; p++) is_list &= isdigit((unsigned char)*p) || *p == ',' || isspace((unsigned char)*p);
    if (is_list) {
        char* s = (char*)mallocCheck(strlen(spec) + 1);
        memcpy(s, spec, strlen(spec) + 1);
        return s;
    }
    FILE* f = fopen(spec, "rb");
    if (f == NULL) fatal("--prompt-tokens: expected \"id,id,...\" or a file of token ids, found '%s' (not a list, and opening it: %s)", spec, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) fatal("--prompt-tokens: cannot seek in %s: %s", spec, strerror(errno));
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) fatal("--prompt-tokens: cannot seek in %s: %s", spec, strerror(errno));
    char* s = (char*)mallocCheck((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) fatal("--prompt-tokens: cannot read %ld bytes of %s", n, spec);
    fclose(f);
    s[n] = '\0';
    return s;
}

// The prompt of --prompt-tokens (NULL: <|endoftext|> alone, the samples' start) in tokens[0..*len), tokens having room
// for maxT: every id in [0, V), at least one of them and at most maxT - 1 (room for one new token). Any other input
// is one error line naming the flag (every rank sees the same).
static void prompt_tokens_parse(const char* spec, int vocab_size, int max_seq_len, int eot, int* tokens, int* len) {
    *len = 0;
    if (spec == NULL) {
        if (eot < 0 || eot >= vocab_size) {
            fatal("--prompt-tokens: none given, and the end-of-text token %d that would start the text is outside the model's "
                  "vocabulary [0, %d) (give the prompt, or the model's --tokenizer)", eot, vocab_size);
        }
        tokens[(*len)++] = eot;
        return;
    }
    char* text = prompt_text(spec);
    int n = 0;
    for (char* p = text; *p;) {
        if (*p == ',' || isspace((unsigned char)*p)) { p++; continue; }
        if (!isdigit((unsigned char)*p)) {
            fatal("--prompt-tokens: expected token ids (digits) separated by commas or white space in %s, found '%.20s'",
                  text == spec ? "the value" : spec, p);
        }
        errno = 0;
        char* end;
        long long id = strtoll(p, &end, 10);
        if (errno != 0 || id >= vocab_size) {
            fatal("--prompt-tokens: expected token ids in [0, %d) (the model's vocabulary), found %.20s (token %d of the prompt)",
                  vocab_size, p, n + 1);
        }
        if (n >= max_seq_len - 1) {
            int total = n + 1;  // count the rest, for the message
            for (char* q = end; *q;) {
                if (isdigit((unsigned char)*q)) { total++; while (isdigit((unsigned char)*q)) q++; } else q++;
            }
            fatal("--prompt-tokens: expected at most maxT - 1 = %d tokens (the model's context, less one for a new token), found %d",
                  max_seq_len - 1, total);
        }
        tokens[n++] = (int)id;
        p = end;
    }
    free(text);
    if (n == 0) fatal("--prompt-tokens: expected at least one token id, found none in '%s'", spec);
    *len = n;
}

// The prompt and its continuation on stdout, one piece of text and a newline: decoded with tok (a leading
// <|endoftext|> that only starts the text is not printed), or without one the ids separated by spaces.
static void generate_print(const Tokenizer* tok, const int* tokens, int len, int eot) {
    int from = tok != NULL && len > 1 && tokens[0] == eot ? 1 : 0;
    print_tokens(tok, tokens + from, len - from);
    printf("\n");
    fflush(stdout);
}
