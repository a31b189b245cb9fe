// Device side of the CUDA example: copy in, two kernels, copy out, behind a C interface.
#include <cuda_runtime.h>

#include <cstdio>

namespace {

__global__ void Axpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void Scale(float s, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] *= s;
}

float* g_x = nullptr;
float* g_y = nullptr;

}  // namespace

// Number of usable GPUs; 0 with the reason in `why` (at least 256 bytes).
extern "C" int ExampleGpuCount(char* why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    std::snprintf(why, 256, "%s", cudaGetErrorString(error));
    return 0;
  }
  if (count == 0) std::snprintf(why, 256, "no CUDA device");
  return count;
}

extern "C" int ExampleAllocate(int n) {
  if (cudaMalloc(&g_x, n * sizeof(float)) != cudaSuccess) return 1;
  if (cudaMalloc(&g_y, n * sizeof(float)) != cudaSuccess) return 1;
  return cudaMemset(g_y, 0, n * sizeof(float)) == cudaSuccess ? 0 : 1;
}

// One step: x (host) -> device, y = 0.5 * (a * x + y), y -> host.
extern "C" int ExampleStep(const float* x, float a, float* y, int n) {
  cudaMemcpy(g_x, x, n * sizeof(float), cudaMemcpyHostToDevice);
  const int threads = 256, blocks = (n + threads - 1) / threads;
  Axpy<<<blocks, threads>>>(a, g_x, g_y, n);
  Scale<<<blocks, threads>>>(0.5f, g_y, n);
  cudaMemcpy(y, g_y, n * sizeof(float), cudaMemcpyDeviceToHost);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" void ExampleFree() {
  cudaFree(g_x);
  cudaFree(g_y);
}
