// tokenizer.h: decodes token ids to text with an llm.c tokenizer file, for printing samples.
// There is no encoder here: data is tokenized by the Python scripts in dev/data/.
//
// File format (docs/formats.md): uint32 header[256]: [0] magic 20240328, [1] version 1 or 2, [2] number
// of tokens n, [3] (version 2 only) the end-of-text token id; version 1 implies 50256. Then for
// each id 0..n-1: one uint8 length, then that many bytes of the token's text (not 0-terminated;
// a token may be a partial UTF-8 sequence). Nothing may follow the last token.
//
// Every bad input ends in one line on stderr naming the file, what was expected and what was found,
// then exit(1).
#pragma once

#include "../core/common.h"
#include <ctype.h>
#include <sys/stat.h>

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_HEADER_INTS 256

typedef struct {
    uint32_t vocab_size;  // n: ids 0..n-1 decode
    char** token_table;   // (n) 0-terminated copies of each token's bytes
    int eot_token;        // the end-of-text id (50256 for GPT-2)
} Tokenizer;

static void tokenizer_read(FILE* f, const char* path, void* dst, size_t bytes, long long at,
                           long long file_size, const char* what) {
    size_t got = fread(dst, 1, bytes, f);
    if (got != bytes) {
        fatal("tokenizer '%s': truncated file: expected %zu more bytes for %s at offset %lld, "
              "found %zu (file size %lld)", path, bytes, what, at, got, file_size);
    }
}

static void tokenizer_init(Tokenizer* tok, const char* path) {
    memset(tok, 0, sizeof(*tok));
    struct stat st;
    if (stat(path, &st) != 0) { fatal("tokenizer: cannot open '%s': %s", path, strerror(errno)); }
    if (!S_ISREG(st.st_mode)) {
        fatal("tokenizer '%s': expected a regular file, found a %s", path,
              S_ISDIR(st.st_mode) ? "directory" : "special file");
    }
    FILE* f = fopen(path, "rb");
    if (f == NULL) { fatal("tokenizer: cannot open '%s': %s", path, strerror(errno)); }
    long long size = (long long)st.st_size;
    uint32_t header[TOKENIZER_HEADER_INTS];
    tokenizer_read(f, path, header, sizeof(header), 0, size, "the header");
    if (header[0] != TOKENIZER_MAGIC) {
        fatal("tokenizer '%s': bad magic: expected %d, found %u", path, TOKENIZER_MAGIC, header[0]);
    }
    uint32_t version = header[1];
    if (version != 1 && version != 2) {
        fatal("tokenizer '%s': bad version: expected 1 or 2, found %u", path, version);
    }
    uint32_t n = header[2];
    if (n == 0 || n > (1u << 30)) {
        fatal("tokenizer '%s': bad number of tokens: expected 1..%u, found %u", path, 1u << 30, n);
    }
    int eot = version == 1 ? 50256 : (int)header[3];
    if (version == 2 && header[3] >= n) {
        fatal("tokenizer '%s': bad end-of-text id: expected < %u tokens, found %u", path, n, header[3]);
    }
    tok->vocab_size = n;
    tok->eot_token = eot;
    tok->token_table = (char**)mallocCheck((size_t)n * sizeof(char*));
    long long at = (long long)sizeof(header);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char len;
        char what[64];
        snprintf(what, sizeof(what), "the length of token %u", i);
        tokenizer_read(f, path, &len, 1, at, size, what);
        at += 1;
        char* text = (char*)mallocCheck((size_t)len + 1);
        snprintf(what, sizeof(what), "the %u bytes of token %u", (unsigned)len, i);
        if (len > 0) { tokenizer_read(f, path, text, len, at, size, what); }
        at += len;
        text[len] = '\0';
        tok->token_table[i] = text;
    }
    if (at != size) {
        fatal("tokenizer '%s': file size disagrees with its %u tokens: expected %lld bytes, found %lld",
              path, n, at, size);
    }
    fcloseCheck(f, path);
}

// the text of token id; ids out of range give a visible marker (never NULL, never a crash)
static const char* tokenizer_decode(const Tokenizer* tok, uint32_t id) {
    if (tok->token_table == NULL || id >= tok->vocab_size) {
        static thread_local char marker[48];
        snprintf(marker, sizeof(marker), "<|invalid token %u|>", id);
        return marker;
    }
    return tok->token_table[id];
}

// prints s to stdout, dropping control bytes: keeps printable ASCII, whitespace (\t \n \v \f \r),
// and bytes >= 0x80 (pieces of UTF-8 characters, which tokens split)
static void tokenizer_print_safe(const char* s) {
    if (s == NULL) { return; }
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
        if (*p >= 0x80 || isprint(*p) || isspace(*p)) { putchar(*p); }
    }
}

static void tokenizer_free(Tokenizer* tok) {
    if (tok->token_table != NULL) {
        for (uint32_t i = 0; i < tok->vocab_size; i++) { free(tok->token_table[i]); }
        free(tok->token_table);
    }
    memset(tok, 0, sizeof(*tok));
}

// prints n token ids as text (or as numbers when there is no tokenizer)
static void print_tokens(const Tokenizer* tok, const int* tokens, int n) {
    for (int i = 0; i < n; i++) {
        if (tok) tokenizer_print_safe(tokenizer_decode(tok, (uint32_t)tokens[i]));
        else printf("%d ", tokens[i]);
    }
}

// The tokenizer at path if that file exists (1), else 0 and, when say, one line: the samples print token ids
// (how: what makes the file, or "")
static int tokenizer_init_if_found(Tokenizer* tok, const char* path, int say, const char* how) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) { fclose(f); tokenizer_init(tok, path); return 1; }
    if (say) printf("tokenizer %s not found: samples print token ids%s%s%s\n", path, how[0] ? " (" : "", how, how[0] ? ")" : "");
    return 0;
}
