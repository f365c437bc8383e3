// Golden token ids straight from libllama (see scripts/tokenizer_golden.py): build against llama.cpp
// (g++ -std=c++17 tokenizer_golden_libllama.cpp -I include -I ggml/include -L lib -lllama -lggml -lggml-base -lggml-cpu)
// and run as `./a.out MODEL.gguf < cases.hex > ids.txt`.
// reads hex-encoded strings one per line, prints the ids llama_tokenize gives (add_special=false, parse_special=true)
#include "llama.h"
#include <cstdio>
#include <string>
#include <vector>
#include <iostream>
int main(int argc, char **argv) {
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab *v = llama_model_get_vocab(m);
    std::string line;
    while (std::getline(std::cin, line)) {
        std::string s;
        for (size_t i = 0; i + 1 < line.size(); i += 2) s.push_back((char)std::stoi(line.substr(i, 2), nullptr, 16));
        std::vector<llama_token> toks(s.size() + 16);
        int n = llama_tokenize(v, s.data(), (int)s.size(), toks.data(), (int)toks.size(), false, true);
        if (n < 0) { toks.resize(-n); n = llama_tokenize(v, s.data(), (int)s.size(), toks.data(), (int)toks.size(), false, true); }
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", toks[i]);
        printf("\n");
    }
    return 0;
}
