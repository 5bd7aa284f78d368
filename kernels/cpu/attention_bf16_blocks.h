// The layouts and blocks attention's bf16 path (attention_bf16.h) shares between its forward
// (attention_bf16.cc) and its backward (attention_bf16_backward.cc): the shape with the blocking
// this CPU takes, the packed bf16 operands, the per-head views the batched products take, and
// writing a block's per-head rows back token-major. Internal to those two files.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/batched_gemm.h"
#include "runtime/base/status.h"
#include "runtime/core/tensor.h"

namespace ds::kernels::cpu::attention_bf16 {

struct Dims {
  int64_t b, t, h, hkv, g, d, row, out_ld;
  int64_t block;  // query rows per block
  bool causal;    // causal blocking: a block multiplies only the keys it sees, and backward
                  // forms dK and dV directly (AMX: all keys, dK^T and dV^T; the .cc says why)
};
Dims DimsOf(const Bf16AttentionShape& s);

// A block's query rows [i0, i0 + m) and the keys [0, keys) its products run over.
struct Block {
  int64_t i0, m, keys;
};
Block BlockOf(const Dims& z, int64_t qb);
int64_t Blocks(const Dims& z);
// The query block's offset in a block-major buffer.
int64_t QueryBlock(const Dims& z, const Block& k);

// Rows of a packed buffer as batches [B, Hkv, G]: the kv heads of [B, Hkv, T, D] (rows [.., +
// rows), broadcast over their group), or one block's query heads [B, H, rows, D] (kv = false).
MatrixView Heads(const Dims& z, bool kv, int64_t rows);
MatrixView Transposed(MatrixView v);
// A block's scores-shaped buffer [B, H, m, keys] (dense) as batches [B, Hkv, G].
MatrixView Scores(const Dims& z, int64_t m, int64_t keys);
// One query head of each group: batches [B, Hkv, 1], for dK and dV, which sum over the group.
MatrixView Member(MatrixView v);

// qkv's K, V in bf16 head-major [B, Hkv, T, D]; Q (and dO of dout) block-major: block i holds
// [B, H, m, D]. qt and doutt: scratch beside them for backward's transposed copies.
struct Packed {
  uint16_t *q, *k, *v, *dout;
  uint16_t *qt, *doutt;
};
Packed Pack(const Dims& z, const Tensor& qkv, const float* dout);

// A block's per-head rows [B, H, m, D] (dense fp32, a product's output) written (or added) into
// a token-major tensor [B, T, ld] at the heads' columns from col0: out, or dqkv's queries.
void ScatterRows(const Dims& z, const Block& k, const float* rows, const Tensor& dst, int64_t ld,
                 int64_t col0, bool add);

// The primitives of backward's dK and dV products of block k (attention_bf16_backward.cc).
Status PrepareKvGradProducts(const Dims& z, const Block& k, float scale);

}  // namespace ds::kernels::cpu::attention_bf16
