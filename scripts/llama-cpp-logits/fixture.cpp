// Writes a model fixture (fixtures README, models/) with llama.cpp itself:
// NAME.logits (every prompt row, the prompt in one decode), NAME.gen (16
// greedy tokens, ties to the lowest id) and NAME.genlogits (the logits after
// feeding each of them, one token per decode). Settings as the shared
// fixtures: CPU, 2 threads, context 512, batch 512, F16 KV cache; flash
// attention and the ubatch size from the command line.
//
// Usage: fixture MODEL_PREFIX OUT_PREFIX FLASH_ATTN(0|1) [UBATCH]
// reads MODEL_PREFIX.gguf and MODEL_PREFIX.tokens.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static std::vector<int> read_tokens(const std::string & path) {
    std::vector<int> v;
    FILE * f = fopen(path.c_str(), "rb");
    if (!f) {
        fprintf(stderr, "fixture: cannot read %s\n", path.c_str());
        exit(1);
    }
    int x;
    while (fread(&x, sizeof(x), 1, f) == 1) {
        v.push_back(x);
    }
    fclose(f);
    return v;
}

static void write_floats(FILE * f, const float * p, int n) {
    if (fwrite(p, sizeof(float), n, f) != (size_t) n) {
        fprintf(stderr, "fixture: short write\n");
        exit(1);
    }
}

static int argmax(const float * l, int n) {
    int best = 0;
    for (int j = 1; j < n; j++) {
        if (l[j] > l[best]) {
            best = j;
        }
    }
    return best;
}

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL_PREFIX OUT_PREFIX FLASH_ATTN(0|1) [UBATCH]\n", argv[0]);
        return 2;
    }
    const std::string model_prefix = argv[1];
    const std::string out = argv[2];
    const bool fa = atoi(argv[3]) != 0;
    const int ubatch = argc > 4 ? atoi(argv[4]) : 512;
    const int n_gen = 16;

    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file((model_prefix + ".gguf").c_str(), mp);
    if (!model) {
        return 1;
    }
    auto cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = ubatch;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    // KV_TYPE=q8_0|q4_0: the K and V cache type (default f16); llama.cpp
    // then rotates K/V (Hadamard) unless LLAMA_ATTN_ROT_DISABLE=1
    if (const char * kv = getenv("KV_TYPE")) {
        const std::string t = kv;
        const ggml_type ty = t == "q8_0" ? GGML_TYPE_Q8_0 : t == "q4_0" ? GGML_TYPE_Q4_0 : GGML_TYPE_F16;
        cp.type_k = ty;
        cp.type_v = ty;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        return 1;
    }
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const std::vector<int> toks = read_tokens(model_prefix + ".tokens");

    llama_batch b = llama_batch_init(512, 0, 1);
    for (size_t i = 0; i < toks.size(); i++) {
        b.token[i] = toks[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = toks.size();
    if (llama_decode(ctx, b)) {
        fprintf(stderr, "fixture: prompt decode failed\n");
        return 1;
    }
    FILE * fl = fopen((out + ".logits").c_str(), "wb");
    for (size_t i = 0; i < toks.size(); i++) {
        write_floats(fl, llama_get_logits_ith(ctx, i), nv);
    }
    fclose(fl);

    std::vector<int> gen;
    int next = argmax(llama_get_logits_ith(ctx, toks.size() - 1), nv);
    FILE * fg = fopen((out + ".genlogits").c_str(), "wb");
    for (int i = 0; i < n_gen; i++) {
        gen.push_back(next);
        b.n_tokens = 1;
        b.token[0] = next;
        b.pos[0] = toks.size() + i;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        if (llama_decode(ctx, b)) {
            fprintf(stderr, "fixture: decode failed\n");
            return 1;
        }
        const float * l = llama_get_logits_ith(ctx, 0);
        write_floats(fg, l, nv);
        next = argmax(l, nv);
    }
    fclose(fg);
    FILE * fo = fopen((out + ".gen").c_str(), "wb");
    fwrite(gen.data(), sizeof(int), gen.size(), fo);
    fclose(fo);

    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
