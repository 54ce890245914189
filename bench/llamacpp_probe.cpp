// Loads a GGUF file with llama.cpp (CPU) and prints the exact bytes of every buffer it allocated,
// from llama.cpp's own accounting (llama_get_memory_breakdown: model / context / compute per buffer
// type) and the output buffer, as one JSON line. Built by bench/gguf_llamacpp.py against libllama.
// usage: llamacpp_probe MODEL N_CTX TYPE_K TYPE_V FLASH_ATTN(0|1|-1) [N_BATCH N_UBATCH [SWA_FULL(0|1)]]
// SWA_FULL defaults to 0, llama-server's and llama-cli's default (common_params::swa_full); the C API's own default is 1.
#include "llama.h"
#include "llama-ext.h"
#include "ggml-backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static ggml_type cache_type(const char * name) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * tn = ggml_type_name((ggml_type) t);
        if (tn && strcmp(tn, name) == 0) {
            return (ggml_type) t;
        }
    }
    fprintf(stderr, "unknown cache type %s\n", name);
    exit(2);
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL N_CTX TYPE_K TYPE_V FLASH_ATTN [N_BATCH N_UBATCH [SWA_FULL]]\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "load failed\n");
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) atoi(argv[2]);
    cp.type_k = cache_type(argv[3]);
    cp.type_v = cache_type(argv[4]);
    cp.flash_attn_type = (llama_flash_attn_type) atoi(argv[5]);
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    if (argc > 7) {
        cp.n_batch = (uint32_t) atoi(argv[6]);
        cp.n_ubatch = (uint32_t) atoi(argv[7]);
    }
    cp.swa_full = argc > 8 ? atoi(argv[8]) != 0 : false;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "context failed\n");
        return 1;
    }
    std::string out = "{\"model_size\": " + std::to_string(llama_model_size(model)) +
                      ", \"n_ctx\": " + std::to_string(llama_n_ctx(ctx)) + ", \"buffers\": {";
    bool first = true;
    for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
        out += std::string(first ? "" : ", ") + "\"" + ggml_backend_buft_name(buft) + "\": {\"model\": " + std::to_string(mb.model) +
               ", \"context\": " + std::to_string(mb.context) + ", \"compute\": " + std::to_string(mb.compute) + "}";
        first = false;
    }
    out += "}}";
    printf("%s\n", out.c_str());
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
