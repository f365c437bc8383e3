// Microbenchmark: a full f32 sum of 25 MiB and 256 MiB, schedules of stride's split
// reduction: two passes (parts, then a one-block fold), one pass whose last block folds the
// parts (atomicInc ticket), wider unrolls, 16-byte loads; CUB as a reference.
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cub/cub.cuh>
typedef long long i64;
#define CK(x) do { auto e_ = (x); if (e_ != 0) { printf("FAIL %s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)e_); exit(1);} } while (0)
#define RBLOCK 256
template <int U>
__device__ float fold(const float* p, i64 st, i64 r0, i64 r1) {
    float a = 0;
    i64 r = r0 + threadIdx.x;
    for (; r + (U - 1) * RBLOCK < r1; r += U * RBLOCK) {
        float x[U];
#pragma unroll
        for (int u = 0; u < U; ++u) x[u] = p[(r + u * RBLOCK) * st];
#pragma unroll
        for (int u = 0; u < U; ++u) a += x[u];
    }
    for (; r < r1; r += RBLOCK) a += p[r * st];
    return a;
}
__device__ float tree(float a) {
    __shared__ float sh[RBLOCK];
    sh[threadIdx.x] = a; __syncthreads();
    for (int s = RBLOCK / 2; s > 0; s >>= 1) { if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s]; __syncthreads(); }
    float r = sh[0]; __syncthreads(); return r;
}
template <int U>
__global__ void __launch_bounds__(RBLOCK, 4) k_part(const float* __restrict__ in, i64 st, i64 n, i64 chunk, float* part) {
    i64 r0 = blockIdx.x * chunk, r1 = min(r0 + chunk, n);
    float s = tree(fold<U>(in, st, r0, r1));
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void k_fin(const float* part, int parts, float* out) {
    float a = 0; for (int c = threadIdx.x; c < parts; c += RBLOCK) a += part[c];
    float s = tree(a); if (threadIdx.x == 0) *out = s;
}
template <int U>
__global__ void __launch_bounds__(RBLOCK, 4) k_one(const float* __restrict__ in, i64 st, i64 n, i64 chunk, float* part, unsigned* ticket, float* out) {
    i64 r0 = blockIdx.x * chunk, r1 = min(r0 + chunk, n);
    float s = tree(fold<U>(in, st, r0, r1));
    __shared__ bool last;
    if (threadIdx.x == 0) { part[blockIdx.x] = s; __threadfence(); last = atomicInc(ticket, gridDim.x - 1) == gridDim.x - 1; }
    __syncthreads();
    if (!last) return;
    __threadfence();
    float a = 0; for (int c = threadIdx.x; c < gridDim.x; c += RBLOCK) a += __ldcg(part + c);
    s = tree(a); if (threadIdx.x == 0) *out = s;
}
// 16-byte loads (contiguous, aligned chunks): U float4 per thread in flight
template <int U>
__global__ void __launch_bounds__(RBLOCK, 4) k_one4(const float* __restrict__ in, i64 n, i64 chunk, float* part, unsigned* ticket, float* out) {
    i64 r0 = blockIdx.x * chunk, r1 = min(r0 + chunk, n);
    const float4* p4 = (const float4*)(in + r0); i64 n4 = (r1 - r0) / 4;
    float a = 0; i64 r = threadIdx.x;
    for (; r + (U - 1) * RBLOCK < n4; r += U * RBLOCK) {
        float4 x[U];
#pragma unroll
        for (int u = 0; u < U; ++u) x[u] = p4[r + u * RBLOCK];
#pragma unroll
        for (int u = 0; u < U; ++u) a += (x[u].x + x[u].y) + (x[u].z + x[u].w);
    }
    for (; r < n4; r += RBLOCK) { float4 v = p4[r]; a += (v.x + v.y) + (v.z + v.w); }
    for (i64 e = r0 + n4 * 4 + threadIdx.x; e < r1; e += RBLOCK) a += in[e];
    float s = tree(a);
    __shared__ bool last;
    if (threadIdx.x == 0) { part[blockIdx.x] = s; __threadfence(); last = atomicInc(ticket, gridDim.x - 1) == gridDim.x - 1; }
    __syncthreads();
    if (!last) return;
    __threadfence();
    a = 0; for (int c = threadIdx.x; c < gridDim.x; c += RBLOCK) a += __ldcg(part + c);
    s = tree(a); if (threadIdx.x == 0) *out = s;
}
template <class F> float time_it(F f, int reps = 200) {
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 20; ++i) f();
    std::vector<float> ts;
    for (int r = 0; r < 9; ++r) { cudaEventRecord(a); for (int i = 0; i < reps; ++i) f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); ts.push_back(ms * 1000 / reps); }
    std::sort(ts.begin(), ts.end()); return ts[4];
}
int main(int argc, char** argv) {
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    for (i64 n : {6553600LL, 67108864LL}) {
        std::vector<float> h(n); for (i64 i = 0; i < n; ++i) h[i] = (float)((i * 2654435761u) % 1000) / 1000.f;
        double ref = 0; for (auto v : h) ref += v;
        float *in, *part, *out, *cp; unsigned* ticket;
        CK(cudaMalloc(&in, n * 4)); CK(cudaMalloc(&cp, n * 4)); CK(cudaMalloc(&part, 1 << 20)); CK(cudaMalloc(&out, 4)); CK(cudaMalloc(&ticket, 4)); CK(cudaMemset(ticket, 0, 4));
        CK(cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice));
        double bytes = n * 4.0;
        float tc = time_it([&] { cudaMemcpyAsync(cp, in, n * 4, cudaMemcpyDeviceToDevice); });
        double bw = 2 * bytes / tc / 1e3;  // GB/s, read + write
        printf("n %lld (%.1f MiB): copy %.1f us = %.0f GB/s; floor (read once at copy bw) %.2f us, 80%% target %.2f us\n", n, bytes / 1048576, tc, bw, bytes / bw / 1e3, bytes / bw / 1e3 / 0.8);
        auto check = [&](const char* name, float t) { float o; cudaMemcpy(&o, out, 4, cudaMemcpyDeviceToHost); printf("  %-40s %7.2f us  %5.0f GB/s  %4.0f%% of copy bw   sum err %.2e\n", name, t, bytes / t / 1e3, 100 * (bytes / t / 1e3) / bw, (o - ref) / ref); };
        for (i64 bps : {4, 8}) {
            i64 parts = std::min((i64)sms * bps, n / 4096);
            i64 chunk = ((n + parts - 1) / parts + 255) / 256 * 256; parts = (n + chunk - 1) / chunk;
            char nm[80];
            sprintf(nm, "two-pass U8 %lld blocks", parts); check(nm, time_it([&] { k_part<8><<<parts, RBLOCK>>>(in, 1, n, chunk, part); k_fin<<<1, RBLOCK>>>(part, parts, out); }));
            sprintf(nm, "one-pass U8 %lld blocks", parts); check(nm, time_it([&] { k_one<8><<<parts, RBLOCK>>>(in, 1, n, chunk, part, ticket, out); }));
            sprintf(nm, "one-pass U16 %lld blocks", parts); check(nm, time_it([&] { k_one<16><<<parts, RBLOCK>>>(in, 1, n, chunk, part, ticket, out); }));
            i64 chunk4 = ((n + parts - 1) / parts + 1023) / 1024 * 1024; i64 parts4 = (n + chunk4 - 1) / chunk4;
            sprintf(nm, "one-pass float4 U2 %lld blocks", parts4); check(nm, time_it([&] { k_one4<2><<<parts4, RBLOCK>>>(in, n, chunk4, part, ticket, out); }));
            sprintf(nm, "one-pass float4 U4 %lld blocks", parts4); check(nm, time_it([&] { k_one4<4><<<parts4, RBLOCK>>>(in, n, chunk4, part, ticket, out); }));
        }
        {
            // the bench's pattern: a 256 MiB copy, then a batch of 10 queued behind it, events
            // around the batch, median of 7 batches
            float *qa, *qb; size_t qn = 256u << 20; CK(cudaMalloc(&qa, qn)); CK(cudaMalloc(&qb, qn));
            i64 parts = std::min((i64)sms * 4, n / 4096);
            i64 chunk = ((n + parts - 1) / parts + 255) / 256 * 256; parts = (n + chunk - 1) / chunk;
            for (int reps : {10, 100}) {
                cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
                std::vector<float> ts;
                for (int bt = 0; bt < 7; ++bt) {
                    cudaMemcpyAsync(qa, qb, qn, cudaMemcpyDeviceToDevice);
                    cudaEventRecord(a);
                    for (int i = 0; i < reps; ++i) k_one<8><<<parts, RBLOCK>>>(in, 1, n, chunk, part, ticket, out);
                    cudaEventRecord(b); cudaEventSynchronize(b);
                    float ms; cudaEventElapsedTime(&ms, a, b); ts.push_back(ms * 1000 / reps);
                }
                std::sort(ts.begin(), ts.end());
                char nm[80]; sprintf(nm, "one-pass U8, bench pattern, %d reps", reps); check(nm, ts[3]);
                // the same without the copy before each batch (idle GPU before the start event)
                ts.clear();
                for (int bt = 0; bt < 7; ++bt) {
                    cudaDeviceSynchronize();
                    cudaEventRecord(a);
                    for (int i = 0; i < reps; ++i) k_one<8><<<parts, RBLOCK>>>(in, 1, n, chunk, part, ticket, out);
                    cudaEventRecord(b); cudaEventSynchronize(b);
                    float ms; cudaEventElapsedTime(&ms, a, b); ts.push_back(ms * 1000 / reps);
                }
                std::sort(ts.begin(), ts.end());
                sprintf(nm, "one-pass U8, idle start, %d reps", reps); check(nm, ts[3]);
            }
            cudaFree(qa); cudaFree(qb);
        }
        void* tmp = nullptr; size_t tb = 0; cub::DeviceReduce::Sum(tmp, tb, in, out, (int)n); CK(cudaMalloc(&tmp, tb));
        check("cub::DeviceReduce::Sum", time_it([&] { cub::DeviceReduce::Sum(tmp, tb, in, out, (int)n); }));
        CK(cudaGetLastError());
        cudaFree(in); cudaFree(cp); cudaFree(part); cudaFree(out); cudaFree(ticket); cudaFree(tmp);
    }
    return 0;
}
