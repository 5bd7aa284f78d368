#include "kernels/cpu/batched_gemm.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace ds::kernels::cpu {
namespace {

using dnnl::memory;

std::atomic<int64_t> g_made{0};

struct Prim {
  dnnl::matmul matmul;
  memory::desc a, b, c, scratchpad;
};

// Every field of the three views, alpha and beta: the primitive's identity.
using Key = std::vector<int64_t>;

void Append(const MatrixView& v, Key* k) {
  for (int i = 0; i < 3; ++i) k->push_back(v.batch[i]), k->push_back(v.batch_stride[i]);
  for (int64_t x : {v.rows, v.cols, v.row_stride, v.col_stride}) k->push_back(x);
}

int64_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

Key MakeKey(const MatrixView& a, const MatrixView& b, const MatrixView& c, float alpha,
            float beta) {
  Key k;
  Append(a, &k);
  Append(b, &k);
  Append(c, &k);
  k.push_back(Bits(alpha));
  k.push_back(Bits(beta));
  return k;
}

memory::desc Desc(const MatrixView& v, memory::data_type t) {
  return memory::desc(
      {v.batch[0], v.batch[1], v.batch[2], v.rows, v.cols}, t,
      {v.batch_stride[0], v.batch_stride[1], v.batch_stride[2], v.row_stride, v.col_stride});
}

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

StatusOr<std::shared_ptr<const Prim>> Make(const MatrixView& a, const MatrixView& b,
                                           const MatrixView& c, float alpha, float beta) {
  auto p = std::make_shared<Prim>();
  p->a = Desc(a, memory::data_type::bf16);
  p->b = Desc(b, memory::data_type::bf16);
  p->c = Desc(c, memory::data_type::f32);
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per calling thread (gemm.cc)
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->a, p->b, p->c), attr, Engine());
    p->scratchpad = pd.scratchpad_desc();
    p->matmul = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    return InternalError("oneDNN cannot make the batched bf16 matmul [" +
                         std::to_string(a.batch[0]) + "x" + std::to_string(a.batch[1]) + "x" +
                         std::to_string(a.batch[2]) + "] " + std::to_string(a.rows) + "x" +
                         std::to_string(a.cols) + " by " + std::to_string(b.rows) + "x" +
                         std::to_string(b.cols) + ": " + e.what());
  }
  g_made.fetch_add(1);
  return std::shared_ptr<const Prim>(std::move(p));
}

std::mutex g_mu;

StatusOr<std::shared_ptr<const Prim>> Find(const MatrixView& a, const MatrixView& b,
                                           const MatrixView& c, float alpha, float beta) {
  static auto* cache = new std::map<Key, std::shared_ptr<const Prim>>();
  const Key key = MakeKey(a, b, c, alpha, beta);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  auto made = Make(a, b, c, alpha, beta);
  if (made.ok()) cache->emplace(key, *made);
  return made;
}

}  // namespace

Status PrepareBatchedGemmBf16(const MatrixView& a, const MatrixView& b, const MatrixView& c,
                              float alpha, float beta) {
  return Find(a, b, c, alpha, beta).status();
}

void BatchedGemmBf16(const MatrixView& a, const uint16_t* pa, const MatrixView& b,
                     const uint16_t* pb, const MatrixView& c, float* pc, float alpha, float beta) {
  auto prim = Find(a, b, c, alpha, beta);
  if (!prim.ok()) {
    std::fprintf(stderr, "ds: %s\n", prim.status().ToString().c_str());
    std::abort();  // a shape PrepareBatchedGemmBf16 would have refused: a bug
  }
  const Prim& p = **prim;
  thread_local dnnl::stream stream(Engine());
  thread_local std::vector<char> scratch;
  if (scratch.size() < p.scratchpad.get_size()) scratch.resize(p.scratchpad.get_size());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(p.a, Engine(), const_cast<uint16_t*>(pa))},
      {DNNL_ARG_WEIGHTS, memory(p.b, Engine(), const_cast<uint16_t*>(pb))},
      {DNNL_ARG_DST, memory(p.c, Engine(), pc)},
      {DNNL_ARG_SCRATCHPAD, memory(p.scratchpad, Engine(), scratch.data())}};
  p.matmul.execute(stream, args);
  stream.wait();
}

int64_t BatchedGemmPrimitivesMade() { return g_made.load(); }

}  // namespace ds::kernels::cpu
