// CUDA C++ source of the bit-spike compress / decompress kernels (pure text; the runtime compiles
// and launches it, see runtime/compress_launch.cpp).
//
// One translation unit holds a compress and a decompress kernel per element width W (1, 2, 4 or
// 8 bytes; the dtype only decides the bit patterns, passed as arguments):
//   extern "C" __global__ void <compress_entry(W)>(const void* spikes, unsigned char* packed,
//                                                  long long n, unsigned long long mask)
//   extern "C" __global__ void <decompress_entry(W)>(const unsigned char* packed, void* spikes,
//                                                    long long n, unsigned long long one)
// An element is a spike when (bits & mask) != 0; decompress writes `one` (the bits of the value
// 1) or 0. A thread owns kVectorsPerThread 16-byte vectors of E = 16 / W spikes, consecutive
// threads consecutive vectors (coalesced), and the 32 / E lanes that share a 32-bit packed word
// combine their bits with warp shuffles. The grid is compress_blocks(n, W) blocks of kBlockSize
// threads; the trailing n % 32 spikes (the last, partial word) are done by thread 0 of block 0.
// Misaligned buffers (spikes not on 16 bytes, packed not on 4) take element-wise accesses.
#pragma once

#include <cstdint>
#include <string>

namespace spikejit::codegen {

constexpr int kBitSpikeBlockSize = 256;
constexpr int kBitSpikeVectorsPerThread = 4;

// The source text (entry: compress_entry(1), which also names it in cache keys and errors).
const std::string& bit_spike_source();
std::string bit_spike_compress_entry(int width);
std::string bit_spike_decompress_entry(int width);

// Grid size for n spikes of `width` bytes (0 when n == 0), for both kernels.
int64_t bit_spike_blocks(int64_t n, int width);

}  // namespace spikejit::codegen
