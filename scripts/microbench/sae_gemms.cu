// Microbenchmark: the six f32 GEMMs of the SAE step at d 384 (batch 4096, 1536 latents), as
// stride maps them to cuBLAS (row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ), through
// (a) cublasGemmStridedBatchedEx_64 batch 1, (b) cublasGemmEx, (c) cuBLASLt heuristic #0,
// (d) cuBLASLt best of the heuristic's top 16 by timing.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#define CK(x) do { auto e_ = (x); if (e_ != 0) { printf("FAIL %s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)e_); exit(1);} } while (0)
struct Mat { int rows, cols; bool colmajor; }; // row-major operand, or its transposed-view storage
struct G { const char* name; int m, n, k; bool ta, tb; }; // row-major C[m,n] = op(A)[m,k] op(B)[k,n]; ta: A is a transposed view (column-major)
static float* dev_rand(size_t n) { std::vector<float> h(n); for (auto& v : h) v = (rand() / (float)RAND_MAX) - 0.5f; float* d; CK(cudaMalloc(&d, n * 4)); CK(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice)); return d; }
template <class F> float time_it(F f, int reps = 50) {
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 5; ++i) f();
    std::vector<float> ts;
    for (int r = 0; r < 7; ++r) { cudaEventRecord(a); for (int i = 0; i < reps; ++i) f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); ts.push_back(ms * 1000 / reps); }
    std::sort(ts.begin(), ts.end()); return ts[3];
}
int main() {
    const int B = 4096, d = 384, n = 1536;
    G gs[] = {
        {"enc   x[B,d]@Wt[d,n]", B, n, d, false, false},
        {"dec   a[B,n]@Wdt[n,d](T)", B, d, n, false, true},
        {"dact  g[B,d]@Wd[d,n]", B, n, d, false, false},
        {"dWdec at[n,B](T)@g[B,d]", n, d, B, true, false},
        {"dWenc xt[d,B](T)@dp[B,n]", d, n, B, true, false},
        {"dx    dp[B,n]@We[n,d](T)", B, d, n, false, true},
    };
    cublasHandle_t h; CK(cublasCreate(&h));
    cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
    size_t ws_size = 32 << 20; void* ws; CK(cudaMalloc(&ws, ws_size));
    CK(cublasSetWorkspace(h, ws, ws_size));
    float *A = dev_rand((size_t)B * n), *Bm = dev_rand((size_t)B * n), *C = dev_rand((size_t)B * n);
    float one = 1, zero = 0;
    double tot[5] = {0, 0, 0, 0, 0};
    for (auto& g : gs) {
        // row-major A [m,k]: ld = k (or m when a transposed view), B [k,n]: ld = n (or k)
        int lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n, ldc = g.n;
        cublasOperation_t opB = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opA = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        double fl = 2.0 * g.m * g.n * g.k;
        float t0 = time_it([&] { CK(cublasGemmStridedBatchedEx_64(h, opB, opA, g.n, g.m, g.k, &one, Bm, CUDA_R_32F, ldb, 0, A, CUDA_R_32F, lda, 0, &zero, C, CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)); });
        float t1 = time_it([&] { CK(cublasGemmEx(h, opB, opA, g.n, g.m, g.k, &one, Bm, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &zero, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)); });
        float t1b = time_it([&] { CK(cublasSgemm(h, opB, opA, g.n, g.m, g.k, &one, Bm, ldb, A, lda, &zero, C, ldc)); });
        // cuBLASLt
        cublasLtMatmulDesc_t md; CK(cublasLtMatmulDescCreate(&md, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)));
        CK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)));
        cublasLtMatrixLayout_t la, lb, lc;
        // first operand (B) as cuBLAS sees it: rows x cols before op
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, g.tb ? g.k : g.n, g.tb ? g.n : g.k, ldb));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, g.ta ? g.m : g.k, g.ta ? g.k : g.m, lda));
        CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, g.n, g.m, ldc));
        cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size)));
        cublasLtMatmulHeuristicResult_t res[16]; int nres = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lt, md, la, lb, lc, lc, pref, 16, res, &nres));
        float t2 = 1e9, t3 = 1e9; int best = -1;
        for (int i = 0; i < nres; ++i) {
            float t = time_it([&] { CK(cublasLtMatmul(lt, md, &one, Bm, la, A, lb, &zero, C, lc, C, lc, &res[i].algo, ws, ws_size, 0)); }, 20);
            if (i == 0) t2 = t;
            if (t < t3) { t3 = t; best = i; }
        }
        printf("%-28s m %5d n %5d k %5d | batchedEx_64 %7.1f us (%5.1f TF) | GemmEx %7.1f | Sgemm %7.1f | Lt#0 %7.1f | Lt best %7.1f (#%d of %d)\n",
               g.name, g.m, g.n, g.k, t0, fl / t0 / 1e6, t1, t1b, t2, t3, best, nres);
        tot[0] += t0; tot[1] += t1; tot[2] += t1b; tot[3] += t2; tot[4] += t3;
    }
    printf("TOTAL batchedEx_64 %.1f us | GemmEx %.1f | Sgemm %.1f | Lt#0 %.1f | Lt best %.1f\n", tot[0], tot[1], tot[2], tot[3], tot[4]);
    return 0;
}
