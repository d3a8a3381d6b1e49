// test_tp_ops.cu: Megatron's conjugate operators exactly (Shoeybi et al. 2019, sec. 3, fig. 3), as the
// column- and row-parallel linear layers of llm/model/linear.h run them on the tp group of llm/comm/comm.h:
//
//   mpirun -np 2 build/test_tp_ops_cpu --tp 2        (and -np 4 --tp 4; the emulated build the same)
//
// Inputs, weights, biases and output gradients are small integers (|v| <= 2), so every product and
// every sum of the test's sizes is an integer below 2^24: exact in FP32 in any order. So each rank's
// results must equal the unsplit layer's (computed here in double) bit for bit:
//   column-parallel (f before it): forward y_r = x W_r^T + b_r is columns [r out/tp, (r+1) out/tp) of
//       the whole y; backward: dW_r and db_r are the rows of the whole dW, db; dx, after f's
//       all-reduce, is the whole dx = dy W on every rank (without the all-reduce it is a part)
//   row-parallel (g after it): forward y after g's all-reduce is the whole x W^T + b on every rank,
//       the bias added once; backward: dy is the whole one (g's backward: identity), dx_r is columns
//       r of the whole dx, dW_r columns r of the whole dW, db the whole db on every rank
// and the tp ledger counts exactly one all-reduce of BT*in values (column backward) and one of BT*out
// values (row forward), none elsewhere. Each check runs on every rank; rank 0 prints one line per
// check with the number of ranks that failed it, then "test_tp_ops: N passed, M failed".
#include "../llm/core/common.h"
#include "../llm/core/device.h"
#include "../llm/core/context.h"
#include "../llm/comm/comm.h"
#include "../llm/model/linear.h"
#include "../llm/core/rand.h"
#include <vector>
#include "world_check.h"
#include "../llm/core/usage.h"

static Comm C;
// a check of every rank (test/world_check.h)
static void tp_check(int ok, const char* what) { world_check(&C, ok, what); }

static std::vector<float> ints(Rng* r, size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)((int)(rng_f32(r) * 5.0f) - 2);  // -2 .. 2
    return v;
}
static floatX* up(const std::vector<float>& h) {
    floatX* d = (floatX*)device_malloc(h.size() * sizeof(floatX), MEM_WORKSPACE);
    copy_floats_to_device(d, h.data(), h.size());
    return d;
}
static std::vector<float> down(const floatX* d, size_t n) {
    std::vector<float> h(n);
    copy_to_host_float(h.data(), d, n);
    return h;
}
// columns [c0, c0 + nc) of a (rows, cols) row-major matrix
static std::vector<float> cols_of(const std::vector<float>& m, int rows, int cols, int c0, int nc) {
    std::vector<float> o((size_t)rows * nc);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nc; j++) o[(size_t)i * nc + j] = m[(size_t)i * cols + c0 + j];
    return o;
}
static int equal(const std::vector<float>& a, const std::vector<float>& b) { return a == b; }

static double tp_calls(CommKind k) { return (double)C.ledger.calls[k][GROUP_TP]; }
static double tp_payload(CommKind k) { return C.ledger.payload_bytes[k][GROUP_TP]; }

static const char* USAGE =
    "[--tp N]   (under mpirun -np N)\n"
    "Tests the column- and row-parallel linear layers (llm/model/linear.h) on the tp group against the unsplit\n"
    "layer, exactly (small-integer inputs).\n"
    "  --tp N  tensor-parallel ranks (default 1)\n";

int main(int argc, char** argv) {
    usage_if_help(argc, argv, USAGE);
    int tp = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tp") && i + 1 < argc) tp = atoi(argv[++i]);
        else fatal("test_tp_ops: unknown argument %s (expected --tp N)", argv[i]);
    }
    comm_init(&C, &argc, &argv, 1, tp, 1);
    context_init();
    TPGroup g = tp_group(&C, 0);
    int tp_size = g.size, r = g.rank, BT = 8, in = 32, out = 64;
    cudaStream_t s = llm_ctx.stream;
    if (C.world_rank == 0) printf("test_tp_ops: tp %d, %s, BT=%d in=%d out=%d\n", tp_size, PRECISION_MODE, BT, in, out);
    Rng rng;
    rng_init(&rng, 1234);  // the same whole tensors on every rank
    std::vector<float> X = ints(&rng, (size_t)BT * in), W = ints(&rng, (size_t)out * in), b = ints(&rng, out);
    std::vector<float> dY = ints(&rng, (size_t)BT * out);
    // the unsplit layer, in double (exact for these integers)
    std::vector<float> Y((size_t)BT * out), dX((size_t)BT * in), dW((size_t)out * in), db(out);
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < out; o++) {
            double acc = b[o];
            for (int k = 0; k < in; k++) acc += (double)X[(size_t)i * in + k] * W[(size_t)o * in + k];
            Y[(size_t)i * out + o] = (float)acc;
        }
    for (int i = 0; i < BT; i++)
        for (int k = 0; k < in; k++) {
            double acc = 0;
            for (int o = 0; o < out; o++) acc += (double)dY[(size_t)i * out + o] * W[(size_t)o * in + k];
            dX[(size_t)i * in + k] = (float)acc;
        }
    for (int o = 0; o < out; o++) {
        double acc_b = 0;
        for (int i = 0; i < BT; i++) acc_b += dY[(size_t)i * out + o];
        db[o] = (float)acc_b;
        for (int k = 0; k < in; k++) {
            double acc = 0;
            for (int i = 0; i < BT; i++) acc += (double)dY[(size_t)i * out + o] * X[(size_t)i * in + k];
            dW[(size_t)o * in + k] = (float)acc;
        }
    }
    float* scratch = (float*)device_malloc((size_t)MATMUL_DBIAS_MAX_SPLITS * out * sizeof(float) + (size_t)BT * out * 4 * sizeof(float), MEM_WORKSPACE);
    char what[200];

    {   // column-parallel: rank r holds output rows [r ol, (r+1) ol) of W and b
        LinearSpec sp = linear_spec_tp("column", in, out, 0, LINEAR_COLUMN_PARALLEL, g);
        int ol = out / tp_size;
        std::vector<float> Wr(W.begin() + (size_t)r * ol * in, W.begin() + (size_t)(r + 1) * ol * in);
        std::vector<float> br(b.begin() + r * ol, b.begin() + (r + 1) * ol);
        floatX *dx = up(X), *dw = up(Wr), *dbias = up(br), *dy = (floatX*)device_malloc((size_t)BT * ol * sizeof(floatX), MEM_WORKSPACE);
        double c0 = tp_calls(COMM_ALL_REDUCE), p0 = tp_payload(COMM_ALL_REDUCE);
        linear_forward(&sp, dy, NULL, dx, dw, dbias, BT, s);
        device_synchronize();
        snprintf(what, sizeof(what), "column-parallel forward: y_r = columns %d..%d of the whole x W^T + b, exactly", r * ol, (r + 1) * ol - 1);
        tp_check(equal(down(dy, (size_t)BT * ol), cols_of(Y, BT, out, r * ol, ol)), what);
        tp_check(tp_calls(COMM_ALL_REDUCE) == c0, "column-parallel forward: no tp collective (f is the identity)");
        std::vector<float> dYr = cols_of(dY, BT, out, r * ol, ol);
        floatX *ddy = up(dYr), *ddx = (floatX*)device_malloc((size_t)BT * in * sizeof(floatX), MEM_WORKSPACE);
        floatX *gw = up(std::vector<float>((size_t)ol * in, 0.0f)), *gb = up(std::vector<float>(ol, 0.0f));
        linear_backward(&sp, ddx, gw, gb, ddy, dx, dw, scratch, NULL, BT, s);
        device_synchronize();
        tp_check(equal(down(ddx, (size_t)BT * in), dX), "column-parallel backward: dx after f's all-reduce = the whole dy W on every rank, exactly");
        std::vector<float> dWr(dW.begin() + (size_t)r * ol * in, dW.begin() + (size_t)(r + 1) * ol * in);
        tp_check(equal(down(gw, (size_t)ol * in), dWr), "column-parallel backward: dW_r = the rank's rows of the whole dW, exactly");
        tp_check(equal(down(gb, ol), std::vector<float>(db.begin() + r * ol, db.begin() + (r + 1) * ol)),
                 "column-parallel backward: db_r = the rank's part of the whole db, exactly");
        snprintf(what, sizeof(what), "column-parallel: one tp all-reduce of BT*in = %d values (f's backward), ledger %.0f calls %.0f B",
                 BT * in, tp_calls(COMM_ALL_REDUCE) - c0, tp_payload(COMM_ALL_REDUCE) - p0);
        tp_check(tp_size == 1 || (tp_calls(COMM_ALL_REDUCE) - c0 == 1 && tp_payload(COMM_ALL_REDUCE) - p0 == (double)BT * in * sizeof(floatX)), what);
        device_free(dx); device_free(dw); device_free(dbias); device_free(dy); device_free(ddy); device_free(ddx);
        device_free(gw); device_free(gb);
    }
    {   // row-parallel: rank r holds input columns [r il, (r+1) il) of W; b replicated, added once
        LinearSpec sp = linear_spec_tp("row", in, out, 0, LINEAR_ROW_PARALLEL, g);
        int il = in / tp_size;
        floatX *dx = up(cols_of(X, BT, in, r * il, il)), *dw = up(cols_of(W, out, in, r * il, il)), *dbias = up(b);
        floatX* dy = (floatX*)device_malloc((size_t)BT * out * sizeof(floatX), MEM_WORKSPACE);
        double c0 = tp_calls(COMM_ALL_REDUCE), p0 = tp_payload(COMM_ALL_REDUCE);
        linear_forward(&sp, dy, NULL, dx, dw, dbias, BT, s);
        device_synchronize();
        tp_check(equal(down(dy, (size_t)BT * out), Y), "row-parallel forward: y after g's all-reduce = the whole x W^T + b on every rank, bias once, exactly");
        snprintf(what, sizeof(what), "row-parallel: one tp all-reduce of BT*out = %d values (g's forward), ledger %.0f calls %.0f B",
                 BT * out, tp_calls(COMM_ALL_REDUCE) - c0, tp_payload(COMM_ALL_REDUCE) - p0);
        tp_check(tp_size == 1 || (tp_calls(COMM_ALL_REDUCE) - c0 == 1 && tp_payload(COMM_ALL_REDUCE) - p0 == (double)BT * out * sizeof(floatX)), what);
        floatX *ddy = up(dY), *ddx = (floatX*)device_malloc((size_t)BT * il * sizeof(floatX), MEM_WORKSPACE);
        floatX *gw = up(std::vector<float>((size_t)out * il, 0.0f)), *gb = up(std::vector<float>(out, 0.0f));
        c0 = tp_calls(COMM_ALL_REDUCE);
        linear_backward(&sp, ddx, gw, gb, ddy, dx, dw, scratch, NULL, BT, s);
        device_synchronize();
        tp_check(equal(down(ddx, (size_t)BT * il), cols_of(dX, BT, in, r * il, il)), "row-parallel backward: dx_r = the rank's columns of the whole dx, exactly");
        tp_check(equal(down(gw, (size_t)out * il), cols_of(dW, out, in, r * il, il)), "row-parallel backward: dW_r = the rank's columns of the whole dW, exactly");
        tp_check(equal(down(gb, out), db), "row-parallel backward: db = the whole db on every rank (the replicated bias stays replicated)");
        tp_check(tp_calls(COMM_ALL_REDUCE) == c0, "row-parallel backward: no tp collective (g's backward is the identity)");
        device_free(dx); device_free(dw); device_free(dbias); device_free(dy); device_free(ddy); device_free(ddx);
        device_free(gw); device_free(gb);
    }
    device_free(scratch);
    int rc = world_summary(&C, "test_tp_ops");
    context_free();
    comm_free(&C);
    return rc;
}
