// test_data.cpp: tests of the data side: llm/train/dataloader.h, llm/train/tokenizer.h, llm/train/logger.h and the
// files dev/data/addition.py writes. No model, no MPI, no GPU.
//
//   make test-data          (or: build/test_data, run from the repository root)
//
// Prints one line per check, then "data: N passed, M failed"; exits 1 if any failed.
// Bad inputs run in child processes (this binary re-executed with "--child MODE ARGS...") whose
// exit status and stderr are checked: non-zero, exactly one line, naming the file or flag and
// saying what was expected and what was found.
#include "../llm/train/dataloader.h"
#include "../llm/train/tokenizer.h"
#include "../llm/train/logger.h"
#include "../llm/core/usage.h"

#include <stdarg.h>
#include <unistd.h>
#include <sys/wait.h>
#include <string>
#include <vector>
#include <algorithm>
#include <set>
#include <utility>

static int g_pass = 0, g_fail = 0;

static void check(bool ok, const char* name, const std::string& detail = "") {
    if (ok) { g_pass++; } else { g_fail++; }
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name, detail.empty() ? "" : ": ", detail.c_str());
    fflush(stdout);
}

static std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char* f, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof(buf), f, ap);
    va_end(ap);
    return buf;
}

static std::string g_tmp;    // the temporary directory of this run
static std::string g_self;   // path of this binary, for child processes

static std::string tmp_path(const char* name) { return g_tmp + "/" + name; }

// ----------------------------------------------------------------------------
// writers of test files (independent of the readers under test)

static void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
    FILE* f = fopenCheck(path.c_str(), "wb");
    if (!bytes.empty()) { fwriteCheck(bytes.data(), 1, bytes.size(), f, path.c_str()); }
    fcloseCheck(f, path.c_str());
}

static void put_u32(std::vector<unsigned char>& b, uint32_t v) {
    for (int i = 0; i < 4; i++) { b.push_back((unsigned char)(v >> (8 * i))); }
}

// a token shard: header (magic, version, n_header), then toks as uint16 (tokbytes 2) or uint32
static void write_shard(const std::string& path, const std::vector<uint32_t>& toks,
                        int magic = 20240520, int version = 1, int64_t n_header = -1, int tokbytes = 2) {
    std::vector<unsigned char> b;
    for (int i = 0; i < 256; i++) {
        uint32_t v = i == 0 ? (uint32_t)magic : i == 1 ? (uint32_t)version
                   : i == 2 ? (uint32_t)(n_header >= 0 ? n_header : (int64_t)toks.size()) : 0;
        put_u32(b, v);
    }
    for (uint32_t t : toks) {
        for (int k = 0; k < tokbytes; k++) { b.push_back((unsigned char)(t >> (8 * k))); }
    }
    write_bytes(path, b);
}

static void write_tokenizer(const std::string& path, const std::vector<std::string>& tokens,
                            int version = 2, int eot = 0, int magic = 20240328) {
    std::vector<unsigned char> b;
    for (int i = 0; i < 256; i++) {
        uint32_t v = i == 0 ? (uint32_t)magic : i == 1 ? (uint32_t)version
                   : i == 2 ? (uint32_t)tokens.size() : (i == 3 && version == 2) ? (uint32_t)eot : 0;
        put_u32(b, v);
    }
    for (const std::string& t : tokens) {
        b.push_back((unsigned char)t.size());
        b.insert(b.end(), t.begin(), t.end());
    }
    write_bytes(path, b);
}

static std::string read_text(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (f == NULL) { return ""; }
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) { s.append(buf, n); }
    fclose(f);
    return s;
}

// ----------------------------------------------------------------------------
// the shard set used by most checks: 3 shards, token value = a running counter from 1000, so the
// first input token of a sample tells where it came from. T = 4.
//   shard 0: 41 tokens -> 10 samples, shard 1: 33 -> 8, shard 2: 58 -> 14; 32 samples per epoch

static const int ST = 4;
static const int SHARD_N[3] = {41, 33, 58};
static const int SHARD_S[3] = {10, 8, 14};
static const int NS = 32;
static std::vector<uint32_t> g_raw[3];
static std::string g_pattern;

static void make_shards(void) {
    uint32_t v = 1000;
    for (int s = 0; s < 3; s++) {
        g_raw[s].clear();
        for (int i = 0; i < SHARD_N[s]; i++) { g_raw[s].push_back(v++); }
        write_shard(tmp_path(fmt("shards/part_%03d.bin", s).c_str()), g_raw[s]);
    }
    g_pattern = tmp_path("shards/part_*.bin");
}

// which sample row b of the batch is: key = shard * 1000 + sample index, or -1 if the row is not
// T+1 consecutive tokens of a shard starting at a multiple of T (inputs, then targets shifted by one)
static int sample_key(const DataLoader* dl, int b) {
    const int32_t* in = dl->inputs + (size_t)b * dl->T;
    const int32_t* tg = dl->targets + (size_t)b * dl->T;
    for (int s = 0; s < 3; s++) {
        int64_t off = (int64_t)in[0] - (int64_t)g_raw[s][0];
        if (off < 0 || off >= SHARD_N[s]) { continue; }
        if (off % dl->T != 0 || off / dl->T >= SHARD_S[s]) { return -1; }
        for (int t = 0; t < dl->T; t++) {
            if ((uint32_t)in[t] != g_raw[s][off + t] || (uint32_t)tg[t] != g_raw[s][off + t + 1]) {
                return -1;
            }
        }
        return s * 1000 + (int)(off / dl->T);
    }
    return -1;
}

// samples of `steps` calls with layout (B, world): per step, the keys of rank 0, then rank 1, ...
static std::vector<std::vector<int>> run_layout(int B, int world, int shuffle, uint64_t seed,
                                                int steps, DataPosition* start = NULL,
                                                DataPosition* end = NULL) {
    std::vector<std::vector<int>> out(steps);
    for (int r = 0; r < world; r++) {
        DataLoader dl;
        dataloader_init(&dl, g_pattern.c_str(), "--train-data", B, ST, r, world, shuffle, seed, 65536);
        if (start != NULL) { dataloader_seek(&dl, *start); }
        for (int s = 0; s < steps; s++) {
            dataloader_next_batch(&dl);
            for (int b = 0; b < B; b++) { out[s].push_back(sample_key(&dl, b)); }
        }
        if (end != NULL) { *end = dataloader_position(&dl); }
        dataloader_free(&dl);
    }
    return out;
}

static std::vector<int> flatten(const std::vector<std::vector<int>>& v) {
    std::vector<int> f;
    for (const auto& s : v) { f.insert(f.end(), s.begin(), s.end()); }
    return f;
}

static std::vector<int> unshuffled_epoch(void) {
    std::vector<int> e;
    for (int s = 0; s < 3; s++) { for (int i = 0; i < SHARD_S[s]; i++) { e.push_back(s * 1000 + i); } }
    return e;
}

static std::string keys_str(const std::vector<int>& v, size_t max = 12) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < max; i++) { s += fmt("%s%d", i ? "," : "", v[i]); }
    if (v.size() > max) { s += ",..."; }
    return s;
}

// ----------------------------------------------------------------------------
// the shuffle as llm/train/dataloader.h's header comment specifies it, written again here from that text
// (splitmix64, Steele, Lea & Flood 2014; Fisher-Yates from the last place down), so that the loader's
// orders are checked against the specification and not only for their properties

static uint64_t ref_fmix(uint64_t z) {  // splitmix64's output function
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static const uint64_t REF_GAMMA = 0x9E3779B97F4A7C15ULL;
static uint64_t ref_mix(uint64_t x) { return ref_fmix(x + REF_GAMMA); }

// Fisher-Yates of 0..n-1 driven by the splitmix64 stream whose state starts at `state`
static std::vector<int> ref_fisher_yates(uint64_t state, int n) {
    std::vector<int> p(n);
    for (int i = 0; i < n; i++) { p[i] = i; }
    for (int i = n - 1; i > 0; i--) {
        state += REF_GAMMA;
        int j = (int)(ref_fmix(state) % (uint64_t)(i + 1));
        std::swap(p[i], p[j]);
    }
    return p;
}

// epoch e's samples as keys (shard index * 1000 + sample), for shards of the given sample counts (in
// sorted order)
static std::vector<int> ref_epoch(uint64_t seed, int64_t e, const std::vector<int>& samples) {
    uint64_t key = ref_mix(ref_mix(seed) ^ (uint64_t)e);
    std::vector<int> order = ref_fisher_yates(ref_mix(key), (int)samples.size()), out;
    for (int s : order) {
        std::vector<int> perm = ref_fisher_yates(ref_mix(key ^ (uint64_t)(s + 1)), samples[s]);
        for (int j : perm) { out.push_back(s * 1000 + j); }
    }
    return out;
}

// ----------------------------------------------------------------------------
// dataloader

static void test_dataloader(void) {
    make_shards();
    std::vector<int> epoch0 = unshuffled_epoch();

    {   // order and targets, no shuffle
        DataLoader dl;
        dataloader_init(&dl, g_pattern.c_str(), "--train-data", 4, ST, 0, 1, 0, 0, 65536);
        check(dataloader_num_samples(&dl) == NS, "dataloader: samples per epoch = sum floor((N-1)/T)",
              fmt("%lld", (long long)dataloader_num_samples(&dl)));
        check(dl.num_shards == 3 && strstr(dl.paths[0], "part_000") && strstr(dl.paths[2], "part_002"),
              "dataloader: glob finds the shards, sorted by name");
        std::vector<int> got;
        bool valid = true;
        for (int s = 0; s < NS / 4; s++) {
            dataloader_next_batch(&dl);
            for (int b = 0; b < 4; b++) { int k = sample_key(&dl, b); valid &= k >= 0; got.push_back(k); }
        }
        check(valid, "dataloader: inputs are T consecutive tokens, targets the same shifted by one");
        check(got == epoch0, "dataloader: epoch order = shards by name, samples at offsets 0, T, 2T...",
              keys_str(got));
        DataPosition p = dataloader_position(&dl);
        check(p.epoch == 1 && p.sample == 0, "dataloader: position after one epoch is (1, 0)",
              fmt("(%lld, %lld)", (long long)p.epoch, (long long)p.sample));
        dataloader_next_batch(&dl);
        std::vector<int> first;
        for (int b = 0; b < 4; b++) { first.push_back(sample_key(&dl, b)); }
        check(first == std::vector<int>(epoch0.begin(), epoch0.begin() + 4),
              "dataloader: epoch wrap-around starts again at the first sample", keys_str(first));
        dataloader_reset(&dl);
        p = dataloader_position(&dl);
        dataloader_next_batch(&dl);
        first.clear();
        for (int b = 0; b < 4; b++) { first.push_back(sample_key(&dl, b)); }
        check(p.epoch == 0 && p.sample == 0 && first == std::vector<int>(epoch0.begin(), epoch0.begin() + 4),
              "dataloader: reset goes back to the first sample of epoch 0");
        dataloader_free(&dl);
    }
    {   // a batch that straddles the end of the epoch: B = 5 does not divide 32
        std::vector<std::vector<int>> steps = run_layout(5, 1, 0, 0, 7);
        std::vector<int> want = {2012, 2013, 0, 1, 2};  // samples 30, 31 (shard 2), then 0, 1, 2
        DataPosition end;
        run_layout(5, 1, 0, 0, 7, NULL, &end);
        check(steps[6] == want && end.epoch == 1 && end.sample == 3,
              "dataloader: a batch across the epoch end continues in the next epoch",
              fmt("step 7 = %s, position (%lld, %lld)", keys_str(steps[6]).c_str(),
                  (long long)end.epoch, (long long)end.sample));
    }
    for (int shuffle = 0; shuffle <= 1; shuffle++) {  // layouts agree step by step
        int steps = 21;  // 84 samples: more than 2.5 epochs
        std::vector<std::vector<int>> a = run_layout(4, 1, shuffle, 42, steps);
        std::vector<std::vector<int>> b = run_layout(2, 2, shuffle, 42, steps);
        std::vector<std::vector<int>> c = run_layout(1, 4, shuffle, 42, steps);
        bool valid = true;
        for (int k : flatten(a)) { valid &= k >= 0; }
        check(valid && a == b && a == c,
              fmt("dataloader: (B,world) = (4,1), (2,2), (1,4) read the same samples per step, in rank "
                  "order (shuffle=%d)", shuffle).c_str(),
              valid ? "" : "invalid sample");
        // and a layout that takes twice as many per step sees the same sequence
        std::vector<std::vector<int>> d = run_layout(4, 2, shuffle, 42, 10);
        std::vector<int> fa = flatten(a), fd = flatten(d);
        fa.resize(fd.size());
        check(fa == fd, fmt("dataloader: (B,world) = (4,2) reads the same sequence (shuffle=%d)", shuffle).c_str());
    }
    {   // shuffle: each epoch is a permutation; shards stay contiguous; order depends on (seed, epoch)
        std::vector<int> s = flatten(run_layout(4, 1, 1, 7, 16));  // 2 epochs
        std::vector<int> e0(s.begin(), s.begin() + NS), e1(s.begin() + NS, s.end());
        std::vector<int> e0s = e0, e1s = e1;
        std::sort(e0s.begin(), e0s.end());
        std::sort(e1s.begin(), e1s.end());
        check(e0s == epoch0 && e1s == epoch0, "dataloader: shuffle: every epoch holds each sample once");
        check(e0 != epoch0 && e0 != e1, "dataloader: shuffle: order differs from unshuffled and between epochs",
              keys_str(e0));
        int changes0 = 0, changes1 = 0;
        for (int i = 1; i < NS; i++) {
            changes0 += e0[i] / 1000 != e0[i - 1] / 1000;
            changes1 += e1[i] / 1000 != e1[i - 1] / 1000;
        }
        check(changes0 == 2 && changes1 == 2, "dataloader: shuffle: one shard at a time (shards permuted, "
              "samples permuted within a shard)", fmt("shard changes %d, %d", changes0, changes1));
        std::vector<int> in0, in1;  // shard 2's samples in the order of epochs 0 and 1
        for (int k : e0) { if (k / 1000 == 2) { in0.push_back(k); } }
        for (int k : e1) { if (k / 1000 == 2) { in1.push_back(k); } }
        check(!std::is_sorted(in0.begin(), in0.end()) && !std::is_sorted(in1.begin(), in1.end()) && in0 != in1,
              "dataloader: shuffle: samples within a shard are permuted, differently per epoch",
              keys_str(in0) + " / " + keys_str(in1));
        std::vector<int> again = flatten(run_layout(4, 1, 1, 7, 16));
        std::vector<int> other = flatten(run_layout(4, 1, 1, 8, 16));
        check(again == s && other != s, "dataloader: shuffle: same seed same order, other seed other order");
    }
    {   // a shuffled batch across the epoch end: the rows after the boundary are epoch 1's first
        // samples in epoch 1's order (as B = 4, which divides the 32 samples, reads them)
        std::vector<int> by4 = flatten(run_layout(4, 1, 1, 11, 16));  // epochs 0 and 1
        std::vector<std::vector<int>> by5 = run_layout(5, 1, 1, 11, 7);
        std::vector<int> want = {by4[30], by4[31], by4[32], by4[33], by4[34]};
        check(by5[6] == want, "dataloader: shuffle: a batch across the epoch end takes the end of epoch 0, then the "
              "start of epoch 1, each in its own order", keys_str(by5[6]) + " vs " + keys_str(want));
    }
    {   // the permutations are uniform (Fisher-Yates), not just any shuffle: over 300 seeds, each of
        // the 14 samples of shard 2 stays at its own place with probability 1/14, so about 300 fixed
        // points in all (sd ~17); a cyclic shuffle (Sattolo's) has none. And sample 0 comes first in
        // ~300/14 = 21 of them.
        int fixed = 0, first = 0;
        for (uint64_t seed = 1; seed <= 300; seed++) {
            std::vector<int> e = flatten(run_layout(4, 1, 1, seed, 8));
            std::vector<int> in2;
            for (int k : e) { if (k / 1000 == 2) { in2.push_back(k % 1000); } }
            for (size_t i = 0; i < in2.size(); i++) { fixed += in2[i] == (int)i; }
            first += !in2.empty() && in2[0] == 0;
        }
        check(fixed > 200 && fixed < 400 && first > 5 && first < 45,
              "dataloader: shuffle: uniform permutations (300 seeds: samples at their own place ~300, sample 0 first ~21)",
              fmt("%d fixed points, sample 0 first %d times", fixed, first));
    }
    for (int shuffle = 0; shuffle <= 1; shuffle++) {  // seek reproduces the rest, also in another layout
        DataPosition mid;
        std::vector<std::vector<int>> head = run_layout(2, 2, shuffle, 3, 7, NULL, &mid);
        std::vector<std::vector<int>> tail = run_layout(2, 2, shuffle, 3, 12, &mid);
        std::vector<std::vector<int>> whole = run_layout(2, 2, shuffle, 3, 19);
        std::vector<std::vector<int>> joined = head;
        joined.insert(joined.end(), tail.begin(), tail.end());
        check(joined == whole, fmt("dataloader: seek to a saved position continues identically (shuffle=%d)",
                                   shuffle).c_str(),
              fmt("saved (%lld, %lld)", (long long)mid.epoch, (long long)mid.sample));
        std::vector<std::vector<int>> tail2 = run_layout(1, 4, shuffle, 3, 12, &mid);
        check(tail2 == tail, fmt("dataloader: resume with another layout (2x2 -> 1x4) continues identically "
                                 "(shuffle=%d)", shuffle).c_str());
    }
    {   // one literal file name; uint32 shards (magic 20240801, version 7)
        std::vector<uint32_t> toks;
        for (int i = 0; i < 21; i++) { toks.push_back(70000 + i * 1000); }
        std::string p = tmp_path("u32.bin");
        write_shard(p, toks, 20240801, 7, -1, 4);
        DataLoader dl;
        dataloader_init(&dl, p.c_str(), "--train-data", 2, 5, 0, 1, 0, 0, 70000 + 20 * 1000 + 1);
        dataloader_next_batch(&dl);
        dataloader_next_batch(&dl);  // samples 2, 3
        bool ok = dataloader_num_samples(&dl) == 4;
        for (int b = 0; b < 2; b++) {
            for (int t = 0; t < 5; t++) {
                ok &= (uint32_t)dl.inputs[b * 5 + t] == toks[(2 + b) * 5 + t];
                ok &= (uint32_t)dl.targets[b * 5 + t] == toks[(2 + b) * 5 + t + 1];
            }
        }
        check(ok, "dataloader: uint32 shard (20240801 v7), plain file name, ids up to vocab_size - 1");
        dataloader_free(&dl);
        int64_t n = 0;
        int32_t* all = dataloader_read_shard(p.c_str(), "--test-data", 0, &n);
        ok = n == 21;
        for (int64_t i = 0; i < n && ok; i++) { ok &= (uint32_t)all[i] == toks[i]; }
        check(ok, "dataloader: dataloader_read_shard returns every token");
        free(all);
    }
    {   // the three shards' epochs, shuffled, against the specification's orders (ref_epoch)
        std::vector<int> got = flatten(run_layout(4, 1, 1, 7, 24));  // 3 epochs of 32
        std::vector<int> want;
        for (int e = 0; e < 3; e++) {
            std::vector<int> w = ref_epoch(7, e, std::vector<int>(SHARD_S, SHARD_S + 3));
            want.insert(want.end(), w.begin(), w.end());
        }
        check(got == want, "dataloader: shuffle: 3 shards, epochs 0..2 = the order the header specifies (splitmix64 "
              "Fisher-Yates of the shards, then of each shard's samples), reimplemented here", keys_str(got) + " vs " + keys_str(want));
    }
    {   // ONE shard read in every epoch: each epoch must permute it anew. (With several shards the loader
        // loads another shard between two epochs' reads of a shard, which would hide a sample order
        // kept from the shard's last load.) 57 tokens, T = 4: 14 samples; B = 4 does not divide 14, so
        // batches also cross the epoch ends. Token value = 5000 + position.
        const int n_samples = 14, n_epochs = 3;
        std::vector<uint32_t> toks;
        for (int i = 0; i < 4 * n_samples + 1; i++) { toks.push_back(5000 + i); }
        std::string p = tmp_path("one_shard.bin");
        write_shard(p, toks);
        DataLoader dl;
        dataloader_init(&dl, p.c_str(), "--train-data", 4, ST, 0, 1, 1, 99, 65536);
        std::vector<int> seq;  // the sample index of every row read, in order
        bool valid = true;
        while ((int)seq.size() < n_epochs * n_samples) {
            dataloader_next_batch(&dl);
            for (int b = 0; b < 4; b++) {
                const int32_t* in = dl.inputs + b * ST;
                const int32_t* tg = dl.targets + b * ST;
                int off = in[0] - 5000;
                valid &= off >= 0 && off % ST == 0 && off / ST < n_samples;
                for (int t = 0; t < ST && valid; t++) { valid &= in[t] == 5000 + off + t && tg[t] == 5000 + off + t + 1; }
                seq.push_back(valid ? off / ST : -1);
            }
        }
        dataloader_free(&dl);
        std::vector<std::vector<int>> ep(n_epochs);
        for (int e = 0; e < n_epochs; e++) { ep[e].assign(seq.begin() + e * n_samples, seq.begin() + (e + 1) * n_samples); }
        bool perms = valid;
        for (int e = 0; e < n_epochs; e++) {
            std::vector<int> srt = ep[e];
            std::sort(srt.begin(), srt.end());
            for (int i = 0; i < n_samples; i++) { perms &= srt[i] == i; }
        }
        check(perms, "dataloader: shuffle, one shard: every epoch reads each of its 14 samples once (inputs and targets "
              "whole samples)");
        check(ep[0] != ep[1] && ep[1] != ep[2] && ep[0] != ep[2], "dataloader: shuffle, one shard: epochs 0, 1 and 2 "
              "each read it in another order", keys_str(ep[0], 14) + " / " + keys_str(ep[1], 14) + " / " + keys_str(ep[2], 14));
        bool spec = true;
        for (int e = 0; e < n_epochs; e++) { spec &= ep[e] == ref_epoch(99, e, std::vector<int>(1, n_samples)); }
        check(spec, "dataloader: shuffle, one shard: each epoch's order = the specification's (reimplemented here)",
              keys_str(ref_epoch(99, 1, std::vector<int>(1, n_samples)), 14) + " expected for epoch 1");
    }
}

// ----------------------------------------------------------------------------
// tokenizer

static void test_tokenizer(void) {
    std::vector<std::string> toks = {"a", "hello", " world", "\xe2\x82", "", "<|endoftext|>", "\n"};
    std::string p = tmp_path("tok_v2.bin");
    write_tokenizer(p, toks, 2, 5);
    Tokenizer tk;
    tokenizer_init(&tk, p.c_str());
    bool ok = tk.vocab_size == toks.size() && tk.eot_token == 5;
    for (size_t i = 0; i < toks.size(); i++) { ok &= toks[i] == tokenizer_decode(&tk, (uint32_t)i); }
    check(ok, "tokenizer: version 2 decodes every token back to its bytes; eot from slot 3");
    const char* bad = tokenizer_decode(&tk, 7);
    const char* bad2 = tokenizer_decode(&tk, 4000000000u);
    check(bad != NULL && strstr(bad, "invalid") != NULL && strstr(bad2, "4000000000") != NULL,
          "tokenizer: out-of-range id gives a visible marker", bad);
    tokenizer_free(&tk);
    check(strstr(tokenizer_decode(&tk, 0), "invalid") != NULL, "tokenizer: decode after free is safe");

    std::string p1 = tmp_path("tok_v1.bin");
    write_tokenizer(p1, toks, 1);
    tokenizer_init(&tk, p1.c_str());
    check(tk.eot_token == 50256 && tk.vocab_size == toks.size(), "tokenizer: version 1 implies eot 50256");
    tokenizer_free(&tk);
}

// ----------------------------------------------------------------------------
// a parser for the flat JSON objects of the log: {"key": number|null|string|true|false, ...}

struct JsonObj { std::vector<std::pair<std::string, std::string>> kv; };

static void json_ws(const char*& p) { while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') { p++; } }

static bool json_string(const char*& p, std::string& out) {
    if (*p != '"') { return false; }
    p++;
    out.clear();
    while (*p && *p != '"') {
        if ((unsigned char)*p < 0x20) { return false; }
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++) { if (!isxdigit((unsigned char)p[i])) { return false; } }
                out += (char)strtol(std::string(p + 1, 4).c_str(), NULL, 16);
                p += 5;
                continue;
            }
            const char* esc = strchr("\"\\/bfnrt", *p);
            if (*p == '\0' || esc == NULL) { return false; }
            out += *p == 'n' ? '\n' : *p == 't' ? '\t' : *p == 'r' ? '\r' : *p == 'b' ? '\b'
                 : *p == 'f' ? '\f' : *p;
            p++;
            continue;
        }
        out += *p++;
    }
    if (*p != '"') { return false; }
    p++;
    return true;
}

static bool json_number(const char*& p, std::string& out) {  // the JSON grammar, strictly
    const char* s = p;
    if (*p == '-') { p++; }
    if (*p == '0') { p++; }
    else if (*p >= '1' && *p <= '9') { while (isdigit((unsigned char)*p)) { p++; } }
    else { return false; }
    if (*p == '.') { p++; if (!isdigit((unsigned char)*p)) { return false; } while (isdigit((unsigned char)*p)) { p++; } }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') { p++; }
        if (!isdigit((unsigned char)*p)) { return false; }
        while (isdigit((unsigned char)*p)) { p++; }
    }
    out.assign(s, p - s);
    return true;
}

static bool json_parse_line(const std::string& line, JsonObj& obj) {
    const char* p = line.c_str();
    obj.kv.clear();
    json_ws(p);
    if (*p++ != '{') { return false; }
    json_ws(p);
    if (*p == '}') { p++; json_ws(p); return *p == '\0'; }
    for (;;) {
        std::string key, val;
        json_ws(p);
        if (!json_string(p, key)) { return false; }
        json_ws(p);
        if (*p++ != ':') { return false; }
        json_ws(p);
        if (*p == '"') { if (!json_string(p, val)) { return false; } }
        else if (strncmp(p, "null", 4) == 0) { val = "null"; p += 4; }
        else if (strncmp(p, "true", 4) == 0) { val = "true"; p += 4; }
        else if (strncmp(p, "false", 5) == 0) { val = "false"; p += 5; }
        else if (!json_number(p, val)) { return false; }
        obj.kv.push_back({key, val});
        json_ws(p);
        if (*p == ',') { p++; continue; }
        if (*p == '}') { p++; break; }
        return false;
    }
    json_ws(p);
    return *p == '\0';
}

static const std::string* json_get(const JsonObj& o, const char* key) {
    for (const auto& kv : o.kv) { if (kv.first == key) { return &kv.second; } }
    return NULL;
}

static std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < s.size()) {
        size_t nl = s.find('\n', start);
        if (nl == std::string::npos) { lines.push_back(s.substr(start)); break; }
        lines.push_back(s.substr(start, nl - start));
        start = nl + 1;
    }
    return lines;
}

// ----------------------------------------------------------------------------
// logger

static void test_logger(void) {
    std::string p = tmp_path("log.jsonl");
    Logger lg;
    logger_init(&lg, p.c_str(), 0);
    logger_log_step(&lg, 1, 2.345678f, NAN, 3e-4f, 1.23f, 123.4f, 4567.8f);
    logger_log_step(&lg, 2, 2.25f, 2.5f, 0.0003f, 1.0f, 100.0f, 5000.0f);
    logger_log_eval(&lg, 2, "hellaswag", 0.291f);
    logger_log_eval(&lg, 2, "odd \"name\"\\", 1.0f);
    logger_log_step(&lg, 3, INFINITY, NAN, 1e-5f, NAN, 1.0f, 2.0f);
    std::string mid = read_text(p);  // flushed per line: readable before the logger is closed
    logger_free(&lg);
    std::vector<std::string> lines = split_lines(read_text(p));
    check(mid == read_text(p) && lines.size() == 5, "logger: one line per call, flushed each line",
          fmt("%zu lines", lines.size()));
    bool all = true;
    std::vector<JsonObj> objs(lines.size());
    for (size_t i = 0; i < lines.size(); i++) { all &= json_parse_line(lines[i], objs[i]); }
    check(all, "logger: every line is one JSON object", all ? "" : lines[0]);
    if (!all || lines.size() != 5) { return; }
    const JsonObj& a = objs[0];
    const char* keys[] = {"step", "train_loss", "lr", "grad_norm", "ms", "tok_per_s"};
    bool ok = a.kv.size() == 6;
    for (int i = 0; i < 6 && ok; i++) { ok &= a.kv[i].first == keys[i]; }
    ok &= json_get(a, "val_loss") == NULL;
    ok &= *json_get(a, "step") == "1" && strtof(json_get(a, "train_loss")->c_str(), NULL) == 2.345678f;
    ok &= strtof(json_get(a, "lr")->c_str(), NULL) == 3e-4f && strtof(json_get(a, "tok_per_s")->c_str(), NULL) == 4567.8f;
    check(ok, "logger: step line has step, train_loss, lr, grad_norm, ms, tok_per_s; NaN val_loss omitted",
          lines[0]);
    const JsonObj& b = objs[1];
    check(json_get(b, "val_loss") != NULL && *json_get(b, "val_loss") == "2.5" &&
          *json_get(b, "train_loss") == "2.25", "logger: measured val_loss is written; short numbers stay short",
          lines[1]);
    check(objs[2].kv.size() == 2 && *json_get(objs[2], "step") == "2" &&
          strtof(json_get(objs[2], "hellaswag")->c_str(), NULL) == 0.291f &&
          json_get(objs[3], "odd \"name\"\\") != NULL, "logger: eval line {\"step\": s, \"<name>\": value}, name escaped",
          lines[3]);
    check(*json_get(objs[4], "train_loss") == "null" && *json_get(objs[4], "grad_norm") == "null" &&
          json_get(objs[4], "val_loss") == NULL, "logger: non-finite values are null", lines[4]);
    // resume appends, a fresh run truncates, no path logs nothing
    logger_init(&lg, p.c_str(), 1);
    logger_log_step(&lg, 4, 1.0f, NAN, 1e-4f, 0.5f, 1.0f, 1.0f);
    logger_free(&lg);
    size_t appended = split_lines(read_text(p)).size();
    logger_init(&lg, p.c_str(), 0);
    logger_log_step(&lg, 1, 1.0f, NAN, 1e-4f, 0.5f, 1.0f, 1.0f);
    logger_free(&lg);
    size_t truncated = split_lines(read_text(p)).size();
    logger_init(&lg, NULL, 0);
    logger_log_step(&lg, 1, 1.0f, NAN, 1e-4f, 0.5f, 1.0f, 1.0f);
    logger_log_eval(&lg, 1, "x", 1.0f);
    logger_free(&lg);
    check(appended == 6 && truncated == 1, "logger: resume=1 appends, resume=0 truncates, NULL path is off",
          fmt("%zu, %zu lines", appended, truncated));
    // a second opinion from Python's json module, where python3 exists
    if (system("python3 -c 'pass' > /dev/null 2>&1") == 0) {
        logger_init(&lg, p.c_str(), 0);
        logger_log_step(&lg, 1, 2.345678f, NAN, 3e-4f, 1.23f, 123.4f, 4567.8f);
        logger_log_step(&lg, 2, INFINITY, 2.5f, 1e-30f, 1e30f, 0.0f, -1.0f);
        logger_log_eval(&lg, 2, "a\"b\\c\x01", 0.5f);
        logger_free(&lg);
        std::string cmd = "python3 -c 'import json,sys\n"
                          "for l in open(sys.argv[1]): json.loads(l, parse_constant=lambda c: 1/0)' " + p;
        check(system(cmd.c_str()) == 0, "logger: python3 json.loads accepts every line (strict constants)");
    } else {
        printf("skip logger: python3 not found\n");
    }
}

// ----------------------------------------------------------------------------
// child processes for bad inputs

struct ChildResult { int status; std::string err, out; };

static ChildResult run_child(const std::vector<std::string>& args) {
    ChildResult res = {-1, "", ""};
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(1); }
    std::string outpath = tmp_path("child_stdout.txt");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        FILE* o = freopen(outpath.c_str(), "wb", stdout);
        if (o == NULL) { _exit(99); }
        std::vector<char*> argv;
        argv.push_back((char*)g_self.c_str());
        argv.push_back((char*)"--child");
        for (const std::string& a : args) { argv.push_back((char*)a.c_str()); }
        argv.push_back(NULL);
        execv(g_self.c_str(), argv.data());
        _exit(98);
    }
    close(fds[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) { res.err.append(buf, (size_t)n); }
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    res.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    res.out = read_text(outpath);
    return res;
}

// expects: exit status != 0, exactly one line on stderr starting "error: ", containing every needle
static void expect_error(const char* name, const std::vector<std::string>& args,
                         const std::vector<std::string>& needles) {
    ChildResult r = run_child(args);
    std::string line = r.err;
    bool one_line = !line.empty() && line.back() == '\n' && line.find('\n') == line.size() - 1;
    bool ok = r.status != 0 && r.status < 128 && one_line && line.rfind("error: ", 0) == 0;
    std::string missing;
    for (const std::string& n : needles) {
        if (line.find(n) == std::string::npos) { ok = false; missing += " [" + n + "]"; }
    }
    if (!line.empty() && line.back() == '\n') { line.pop_back(); }
    check(ok, name, fmt("exit %d, stderr: %s%s%s", r.status, line.c_str(),
                        missing.empty() ? "" : " -- missing:", missing.c_str()));
}

// the modes a child runs
static int child_main(int argc, char** argv) {
    if (argc < 1) { return 2; }
    const char* mode = argv[0];
    if (strcmp(mode, "loader") == 0 && argc == 5) {  // loader PATTERN B T VOCAB: read one epoch + 1
        DataLoader dl;
        int B = atoi(argv[2]), T = atoi(argv[3]);
        dataloader_init(&dl, argv[1], "--train-data", B, T, 0, 1, 0, 0, atoi(argv[4]));
        int64_t calls = dataloader_num_samples(&dl) / B + 1;
        for (int64_t i = 0; i < calls; i++) { dataloader_next_batch(&dl); }
        dataloader_free(&dl);
        return 0;
    }
    if (strcmp(mode, "vanish") == 0 && argc == 3) {  // vanish PATTERN FILE: FILE is removed after init
        DataLoader dl;
        dataloader_init(&dl, argv[1], "--train-data", 2, 4, 0, 1, 0, 0, 65536);
        if (remove(argv[2]) != 0) { return 3; }
        for (int i = 0; i < 100; i++) { dataloader_next_batch(&dl); }
        return 0;
    }
    if (strcmp(mode, "seek") == 0 && argc == 4) {  // seek PATTERN EPOCH SAMPLE
        DataLoader dl;
        dataloader_init(&dl, argv[1], "--train-data", 2, 4, 0, 1, 0, 0, 65536);
        DataPosition p = {atoll(argv[2]), atoll(argv[3])};
        dataloader_seek(&dl, p);
        return 0;
    }
    if (strcmp(mode, "rank") == 0 && argc == 2) {
        DataLoader dl;
        dataloader_init(&dl, argv[1], "--train-data", 2, 4, 2, 2, 0, 0, 65536);
        return 0;
    }
    if (strcmp(mode, "tokenizer") == 0 && argc == 2) {
        Tokenizer tk;
        tokenizer_init(&tk, argv[1]);
        tokenizer_free(&tk);
        return 0;
    }
    if (strcmp(mode, "print_safe") == 0 && argc == 1) {
        tokenizer_print_safe("ab\x01\x1b[31m\tc\n\xc3\xa9\x7f" "d");
        return 0;
    }
    if (strcmp(mode, "logger") == 0 && argc == 2) {
        Logger lg;
        logger_init(&lg, argv[1], 0);
        return 0;
    }
    fprintf(stderr, "unknown child mode\n");
    return 2;
}

static void test_bad_inputs(void) {
    std::string d = tmp_path("bad");
    std::vector<uint32_t> ok_toks(41, 7);

    std::string p = d + "/magic.bin";
    write_shard(p, ok_toks, 12345, 1);
    expect_error("bad input: wrong shard magic", {"loader", p, "2", "4", "50257"},
                 {"--train-data", p, "magic", "expected 20240520", "found 12345"});
    p = d + "/eval.bin";
    write_shard(p, ok_toks, 20240522, 1);
    expect_error("bad input: an llm.c eval file given as a shard", {"loader", p, "2", "4", "50257"},
                 {"--train-data", p, "magic", "expected 20240520", "found 20240522", "eval"});
    p = d + "/version.bin";
    write_shard(p, ok_toks, 20240520, 3);
    expect_error("bad input: wrong shard version", {"loader", p, "2", "4", "50257"},
                 {"--train-data", p, "version", "expected 1", "found 3"});
    p = d + "/version7.bin";
    write_shard(p, ok_toks, 20240801, 1, -1, 4);
    expect_error("bad input: wrong version for uint32 magic", {"loader", p, "2", "4", "50257"},
                 {"--train-data", p, "version", "expected 7", "found 1"});
    p = d + "/size.bin";
    write_shard(p, std::vector<uint32_t>(90, 7), 20240520, 1, 100);
    expect_error("bad input: file size disagrees with header", {"loader", p, "2", "4", "50257"},
                 {"--train-data", p, "size", "expected 1224 bytes", "found 1204"});
    p = d + "/short_header.bin";
    write_bytes(p, std::vector<unsigned char>(100, 0));
    expect_error("bad input: file shorter than a header", {"loader", p, "2", "4", "50257"},
                 {"--train-data", p, "header", "expected 1024 bytes", "found 100"});
    // a bad token in the second shard: found when that shard is loaded
    write_shard(d + "/tok_000.bin", ok_toks);
    std::vector<uint32_t> bad_toks(41, 7);
    bad_toks[7] = 50300;
    bad_toks[9] = 60000;
    write_shard(d + "/tok_001.bin", bad_toks);
    expect_error("bad input: token id >= vocab size (second shard, found when loaded)",
                 {"loader", d + "/tok_*.bin", "2", "4", "50257"},
                 {"--train-data", d + "/tok_001.bin", "position 7", "expected < vocab size 50257", "found 50300"});
    expect_error("bad input: missing file", {"loader", d + "/no_such_file.bin", "2", "4", "50257"},
                 {"--train-data", d + "/no_such_file.bin", "cannot open", "No such file"});
    expect_error("bad input: glob matching nothing", {"loader", d + "/nothing_*.bin", "2", "4", "50257"},
                 {"error: --train-data: no files match '" + d + "/nothing_*.bin'"});
    if (system(("mkdir -p " + d + "/dir_000.bin").c_str()) != 0) { check(false, "mkdir"); }
    expect_error("bad input: glob matching a directory", {"loader", d + "/dir_*.bin", "2", "4", "50257"},
                 {"--train-data", d + "/dir_000.bin", "expected a regular file", "found a directory"});
    p = d + "/small.bin";
    write_shard(p, std::vector<uint32_t>(4, 7));
    expect_error("bad input: shard too small for one sample", {"loader", p, "2", "4", "50257"},
                 {"--train-data", p, "too small", "expected at least T+1 = 5", "found 4"});
    expect_error("bad input: B = 0", {"loader", d + "/tok_000.bin", "0", "4", "50257"},
                 {"--train-data", "B=0"});
    expect_error("bad input: T = -1", {"loader", d + "/tok_000.bin", "2", "-1", "50257"},
                 {"--train-data", "T=-1"});
    expect_error("bad input: rank >= world", {"rank", d + "/tok_000.bin"},
                 {"--train-data", "rank=2", "world=2"});
    write_shard(d + "/van_000.bin", ok_toks);
    write_shard(d + "/van_001.bin", ok_toks);
    expect_error("bad input: shard removed after init", {"vanish", d + "/van_*.bin", d + "/van_001.bin"},
                 {"--train-data", d + "/van_001.bin", "cannot open", "No such file"});
    expect_error("bad input: seek beyond the data", {"seek", d + "/tok_000.bin", "0", "10"},
                 {"--train-data", "seek", "[0, 10)", "sample 10"});

    std::vector<std::string> toks = {"a", "bb", "ccc"};
    p = d + "/tok_trunc.bin";
    write_tokenizer(p, toks, 2, 0);
    std::string full = read_text(p);
    FILE* f = fopenCheck(p.c_str(), "wb");
    fwriteCheck(full.data(), 1, full.size() - 2, f, p.c_str());  // cut into the last token
    fcloseCheck(f, p.c_str());
    expect_error("bad input: truncated tokenizer", {"tokenizer", p},
                 {"tokenizer", p, "truncated", "expected 3 more bytes", "token 2", "found 1"});
    p = d + "/tok_magic.bin";
    write_tokenizer(p, toks, 2, 0, 20240327);
    expect_error("bad input: tokenizer magic", {"tokenizer", p},
                 {"tokenizer", p, "magic", "expected 20240328", "found 20240327"});
    p = d + "/tok_version.bin";
    write_tokenizer(p, toks, 3, 0);
    expect_error("bad input: tokenizer version", {"tokenizer", p},
                 {"tokenizer", p, "version", "expected 1 or 2", "found 3"});
    p = d + "/tok_extra.bin";
    write_tokenizer(p, toks, 2, 0);
    f = fopenCheck(p.c_str(), "ab");
    fwriteCheck("xy", 1, 2, f, p.c_str());
    fcloseCheck(f, p.c_str());
    expect_error("bad input: tokenizer with trailing bytes", {"tokenizer", p},
                 {"tokenizer", p, "expected 1033 bytes", "found 1035"});
    p = d + "/tok_eot.bin";
    write_tokenizer(p, toks, 2, 3);
    expect_error("bad input: tokenizer eot out of range", {"tokenizer", p},
                 {"tokenizer", p, "end-of-text", "expected < 3", "found 3"});
    expect_error("bad input: missing tokenizer", {"tokenizer", d + "/none_tokenizer.bin"},
                 {"tokenizer", d + "/none_tokenizer.bin", "cannot open", "No such file"});
    expect_error("bad input: log file in a missing directory", {"logger", d + "/no/dir/log.jsonl"},
                 {"log file", d + "/no/dir/log.jsonl", "cannot open"});

    ChildResult r = run_child({"print_safe"});
    check(r.status == 0 && r.out == "ab[31m\tc\n\xc3\xa9" "d", "tokenizer: print_safe drops control bytes, "
          "keeps printable, whitespace and UTF-8", fmt("'%s'", r.out.c_str()));
}

// ----------------------------------------------------------------------------
// dev/data/addition.py: deterministic, loadable, correct sums, held-out test set

// width 0: no leading zeros allowed; width > 0: exactly that many digits, zero-padded
static bool parse_uint(const std::string& s, long long* v, size_t width = 0) {
    if (s.empty() || s.size() > 18) { return false; }
    for (char c : s) { if (!isdigit((unsigned char)c)) { return false; } }
    if (width == 0 && s.size() > 1 && s[0] == '0') { return false; }
    if (width > 0 && s.size() != width) { return false; }
    *v = atoll(s.c_str());
    return true;
}

// the documents of an addition shard as (a, b) pairs; false if any document is malformed
// pad: the operand width of `addition.py --pad 1 --digits pad` (0 for --pad 0)
static bool addition_docs(const std::string& path, std::vector<std::pair<long long, long long>>& out,
                          std::string& why, size_t pad = 3) {
    int64_t n = 0;
    int32_t* t = dataloader_read_shard(path.c_str(), "addition", 257, &n);
    out.clear();
    int64_t i = 0;
    bool ok = true;
    while (i < n && ok) {
        if (t[i] != 256) { why = fmt("position %lld: expected <|endoftext|>", (long long)i); ok = false; break; }
        int64_t j = i + 1;
        std::string doc;
        while (j < n && t[j] != 256) { doc += (char)t[j]; j++; }
        // a+b=reversed(a+b)\n
        size_t plus = doc.find('+'), eq = doc.find('=');
        long long a = 0, b = 0, r = 0;
        std::string rev;
        if (plus == std::string::npos || eq == std::string::npos || eq < plus || doc.empty() ||
            doc.back() != '\n' || !parse_uint(doc.substr(0, plus), &a, pad) ||
            !parse_uint(doc.substr(plus + 1, eq - plus - 1), &b, pad)) {
            why = "malformed document '" + doc + "'";
            ok = false;
            break;
        }
        rev = doc.substr(eq + 1, doc.size() - eq - 2);
        std::reverse(rev.begin(), rev.end());
        if (!parse_uint(rev, &r, pad ? pad + 1 : 0) || r != a + b) { why = "wrong answer in '" + doc + "'"; ok = false; break; }
        out.push_back({a, b});
        i = j;
    }
    free(t);
    return ok;
}

static void test_addition(void) {
    if (access("dev/data/addition.py", R_OK) != 0 || system("python3 -c 'pass' > /dev/null 2>&1") != 0) {
        printf("skip addition.py: run from the repository root with python3 on the PATH\n");
        return;
    }
    std::string o1 = tmp_path("add1"), o2 = tmp_path("add2");
    std::string flags = " --digits 3 --train 3000 --val 400 --test 200 --seed 5 --out ";
    int rc1 = system(("python3 dev/data/addition.py" + flags + o1 + " > /dev/null").c_str());
    int rc2 = system(("python3 dev/data/addition.py" + flags + o2 + " > /dev/null").c_str());
    const char* files[] = {"addition_tokenizer.bin", "addition_train.bin", "addition_val.bin", "addition_test.bin"};
    bool same = rc1 == 0 && rc2 == 0;
    for (const char* f : files) {
        std::string a = read_text(o1 + "/" + f), b = read_text(o2 + "/" + f);
        same &= !a.empty() && a == b;
    }
    check(same, "addition.py: two runs with the same flags write identical bytes");
    if (!same) { return; }

    Tokenizer tk;
    tokenizer_init(&tk, (o1 + "/addition_tokenizer.bin").c_str());
    bool ok = tk.vocab_size == 257 && tk.eot_token == 256 && strcmp(tokenizer_decode(&tk, 256), "<|endoftext|>") == 0;
    for (uint32_t i = 1; i < 256; i++) { ok &= tokenizer_decode(&tk, i)[0] == (char)i && tokenizer_decode(&tk, i)[1] == 0; }
    check(ok, "addition.py: tokenizer v2, 257 tokens, bytes then <|endoftext|> = 256");
    tokenizer_free(&tk);

    DataLoader dl;
    dataloader_init(&dl, (o1 + "/addition_train.bin").c_str(), "--train-data", 8, 32, 0, 1, 1, 1, 257);
    int64_t calls = dataloader_num_samples(&dl) / 8 + 1;
    for (int64_t i = 0; i < calls; i++) { dataloader_next_batch(&dl); }
    check(dataloader_num_samples(&dl) > 0, "addition.py: train shard loads with vocab 257",
          fmt("%lld samples of T=32", (long long)dataloader_num_samples(&dl)));
    dataloader_free(&dl);

    std::vector<std::pair<long long, long long>> tr, va, te;
    std::string why;
    bool parsed = addition_docs(o1 + "/addition_train.bin", tr, why) &&
                  addition_docs(o1 + "/addition_val.bin", va, why) &&
                  addition_docs(o1 + "/addition_test.bin", te, why);
    check(parsed && tr.size() == 3000 && va.size() == 400 && te.size() == 200,
          "addition.py: every document is <EOT>a+b=reversed(a+b)\\n, counts as asked", why);
    if (!parsed) { return; }
    std::set<std::pair<long long, long long>> trs(tr.begin(), tr.end()), tes(te.begin(), te.end());
    size_t overlap_test = 0, overlap_val = 0, max_digits_ok = 1;
    for (const auto& x : te) { overlap_test += trs.count(x); }
    for (const auto& x : va) { overlap_val += trs.count(x) + tes.count(x); }
    for (const auto& x : tr) { max_digits_ok &= x.first < 1000 && x.second < 1000; }
    check(overlap_test == 0 && overlap_val == 0 && tes.size() == te.size() && max_digits_ok,
          "addition.py: test and val problems never occur in train; test problems distinct; <= 3 digits",
          fmt("overlaps %zu, %zu", overlap_test, overlap_val));
}

// ----------------------------------------------------------------------------

static const char* USAGE =
    "(no arguments; run from the repository root)\n"
    "Tests the data side: llm/train/dataloader.h, tokenizer.h, logger.h and dev/data/addition.py's files, bad\n"
    "inputs in child processes (this program re-run with --child).\n";

int main(int argc, char** argv) {
    usage_if_help(argc, argv, USAGE);
    if (argc >= 2 && strcmp(argv[1], "--child") == 0) { return child_main(argc - 2, argv + 2); }
    usage_args(argc, argv, USAGE);  // (after --child, which is this program's own)
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) { fprintf(stderr, "error: cannot find this binary via /proc/self/exe\n"); return 1; }
    exe[n] = '\0';
    g_self = exe;
    char tmpl[] = "/tmp/test_data_XXXXXX";
    if (mkdtemp(tmpl) == NULL) { fprintf(stderr, "error: mkdtemp: %s\n", strerror(errno)); return 1; }
    g_tmp = tmpl;
    if (system(("mkdir -p " + g_tmp + "/shards " + g_tmp + "/bad").c_str()) != 0) { return 1; }

    test_dataloader();
    test_tokenizer();
    test_logger();
    test_bad_inputs();
    test_addition();

    if (system(("rm -rf " + g_tmp).c_str()) != 0) { fprintf(stderr, "warning: could not remove %s\n", g_tmp.c_str()); }
    printf("data: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail == 0 ? 0 : 1;
}
