// logger.h: the training log, one JSON object per line (JSON Lines), flushed after each line so a
// crashed or running job can be read at any time. Only the process that should log calls it (the
// trainer's rank 0); a Logger made with path NULL does nothing.
//
//   {"step": 12, "train_loss": 2.345678, "val_loss": 2.5, "lr": 0.0003, "grad_norm": 1.23,
//    "ms": 123.4, "tok_per_s": 4567.8, "mfu": 0.0123, "comm_wait_ms": 1.2}
//                                      (one line; val_loss only when measured, comm_wait_ms only
//                                       under data parallelism, loss_scale with a loss scaler,
//                                       "skipped": "<reason>" on a skipped step; "hellaswag_acc_norm",
//                                       "hellaswag_correct", "hellaswag_examples" where HellaSwag was
//                                       scored: llm/train/progress.h)
//   {"step": 7, "rollback_to": 3, "reason": "..."}        (logger_log_rollback, llm/faults/health.h)
//   {"step": 3, "resumed_from": "out/state_00000003.bin"}  (logger_log_resume: a resumed run's first line)
//   {"step": 12, "hellaswag": 0.291}                      (logger_log_eval)
//
// A resumed run appends to the log of the run it resumes, which may hold steps after the checkpoint (the
// run was killed some steps after its last save), and a rollback repeats steps: each marks where the
// steps start over, and a step logged again after such a mark replaces the earlier line of that step
// (scripts/plot_logs.py draws the course the run took, each step once).
//
// Numbers are written with the fewest significant digits (6 to 9) that read back as the same
// float, so a log can be compared bit for bit between runs. JSON has no NaN or Infinity: a
// non-finite value is written as null (a diverged loss shows as null, not as a missing key).
#pragma once

#include "../core/common.h"

typedef struct {
    FILE* f;     // NULL: logging is off
    char* path;  // for error messages
} Logger;

// path NULL: no log. resume 1: append to the file (a resumed run continues its log), 0: truncate.
static void logger_init(Logger* lg, const char* path, int resume) {
    lg->f = NULL;
    lg->path = NULL;
    if (path == NULL || path[0] == '\0') { return; }
    lg->f = fopen(path, resume ? "ab" : "wb");
    if (lg->f == NULL) {
        fatal("log file '%s': cannot open for %s: %s", path, resume ? "appending" : "writing",
              strerror(errno));
    }
    size_t len = strlen(path) + 1;
    lg->path = (char*)mallocCheck(len);
    memcpy(lg->path, path, len);
}

// a float as the shortest %.Ng (N = 6..9) that parses back to the same float; null if not finite
static void logger_format_float(char* buf, size_t cap, float v) {
    if (!isfinite(v)) { snprintf(buf, cap, "null"); return; }
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, cap, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) { break; }
    }
}

// appends `, "key": value` to line
static void logger_append_float(char* line, size_t cap, const char* key, float v) {
    char num[40];
    logger_format_float(num, sizeof(num), v);
    size_t used = strlen(line);
    snprintf(line + used, cap - used, ", \"%s\": %s", key, num);
}

static void logger_write_line(Logger* lg, const char* line) {
    if (fputs(line, lg->f) < 0 || fputc('\n', lg->f) == EOF || fflush(lg->f) != 0) {
        fatal("log file '%s': write failed: %s", lg->path, strerror(errno));
    }
}

// one training step. val_loss NaN: not measured at this step, the key is left out.
// lr: learning rate used at this step; grad_norm: global L2 norm before clipping;
// ms: wall time of the step in milliseconds; tokens_per_s: throughput of the step (all ranks);
// mfu: the model FLOPs utilisation as a fraction (not percent) of the peak (llm/train/mfu.h), left out when NaN.
// comm_wait_ms: how long rank 0's computation waited in the step for gradient reductions and
// parameter gathers (data parallelism; measured by llm/comm/comm.h), NaN:
// the key is left out. loss_scale: the loss scale this step's backward used (llm/precision/loss_scale.h), left
// out when NaN (no scaler). skipped: why the step was skipped (llm/faults/health.h: "overflow", "loss nan",
// "loss z-score 9.1 > 4", ...), a JSON string; NULL: applied, the key is left out. aux_loss, z_loss: a moe
// model's (NaN: left out); extra: more keys, already JSON (", \"key\": value..."), or NULL.
static void logger_log_step(Logger* lg, int step, float train_loss, float val_loss, float lr,
                            float grad_norm, float ms, float tokens_per_s, float mfu = NAN, float comm_wait_ms = NAN,
                            float loss_scale = NAN, const char* skipped = NULL, float aux_loss = NAN, float z_loss = NAN,
                            const char* extra = NULL) {
    if (lg->f == NULL) { return; }
    size_t cap = 512 + (extra != NULL ? strlen(extra) : 0);
    char* line = (char*)mallocCheck(cap);
    snprintf(line, cap, "{\"step\": %d", step);
    logger_append_float(line, cap, "train_loss", train_loss);
    if (!isnan(val_loss)) { logger_append_float(line, cap, "val_loss", val_loss); }
    logger_append_float(line, cap, "lr", lr);
    logger_append_float(line, cap, "grad_norm", grad_norm);
    logger_append_float(line, cap, "ms", ms);
    logger_append_float(line, cap, "tok_per_s", tokens_per_s);
    if (!isnan(mfu)) logger_append_float(line, cap, "mfu", mfu);
    if (!isnan(comm_wait_ms)) { logger_append_float(line, cap, "comm_wait_ms", comm_wait_ms); }
    if (!isnan(loss_scale)) logger_append_float(line, cap, "loss_scale", loss_scale);
    if (!isnan(aux_loss)) logger_append_float(line, cap, "aux_loss", aux_loss);
    if (!isnan(z_loss)) logger_append_float(line, cap, "z_loss", z_loss);
    if (skipped != NULL) {  // (the reasons hold no quote or backslash)
        size_t n = strlen(line);
        snprintf(line + n, cap - n, ", \"skipped\": \"%s\"", skipped);
    }
    if (extra != NULL) { size_t n = strlen(line); snprintf(line + n, cap - n, "%s", extra); }
    size_t used = strlen(line);
    snprintf(line + used, cap - used, "}");
    logger_write_line(lg, line);
    free(line);
}

// s as the inside of a JSON string (quotes, backslashes and control characters escaped)
static void logger_json_escape(char* out, size_t cap, const char* s) {
    size_t k = 0;
    for (const unsigned char* p = (const unsigned char*)s; *p && k + 7 < cap; p++) {
        if (*p == '"' || *p == '\\') { out[k++] = '\\'; out[k++] = (char)*p; }
        else if (*p < 0x20) { k += snprintf(out + k, cap - k, "\\u%04x", *p); }
        else { out[k++] = (char)*p; }
    }
    out[k] = '\0';
}

// the rollback after a streak of bad steps or an SDC mismatch (llm/faults/health.h): {"step": step,
// "rollback_to": to, "reason": "..."}
static void logger_log_rollback(Logger* lg, int step, int to, const char* reason) {
    if (lg->f == NULL) { return; }
    char esc[700], line[1024];
    logger_json_escape(esc, sizeof(esc), reason);
    snprintf(line, sizeof(line), "{\"step\": %d, \"rollback_to\": %d, \"reason\": \"%s\"}", step, to, esc);
    logger_write_line(lg, line);
}

// a resumed run's first line: {"step": step, "resumed_from": "<path>"}: the steps after it start over
static void logger_log_resume(Logger* lg, int step, const char* path) {
    if (lg->f == NULL) { return; }
    char esc[1200], line[1400];
    logger_json_escape(esc, sizeof(esc), path);
    snprintf(line, sizeof(line), "{\"step\": %d, \"resumed_from\": \"%s\"}", step, esc);
    logger_write_line(lg, line);
}

// one evaluation result: {"step": step, "<name>": value}. name is escaped as a JSON string.
static void logger_log_eval(Logger* lg, int step, const char* name, float value) {
    if (lg->f == NULL) { return; }
    char key[256];
    logger_json_escape(key, sizeof(key), name);
    char line[512];
    snprintf(line, sizeof(line), "{\"step\": %d", step);
    logger_append_float(line, sizeof(line), key, value);
    size_t used = strlen(line);
    snprintf(line + used, sizeof(line) - used, "}");
    logger_write_line(lg, line);
}

static void logger_free(Logger* lg) {
    if (lg->f != NULL) { fcloseCheck(lg->f, lg->path); }
    free(lg->path);
    lg->f = NULL;
    lg->path = NULL;
}
