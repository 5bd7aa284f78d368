// Test helpers for runtime/ckpt: temp dirs, random tensors, on-disk corruption.
// Test-only; abort on I/O failure (a broken test environment, not a tested path).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/tensor.h"

namespace ds::ckpt::testing {

// A new empty directory under $TEST_TMPDIR (or /tmp), unique per call.
std::string MakeTempDir(const std::string& tag);
// Fills `t` with deterministic pseudo-random values (finite floats in [-1, 1), ints).
void FillRandom(const Tensor& t, uint32_t seed);
OwnedTensor RandomTensor(Shape shape, DType dtype, uint32_t seed);
// Same shape, dtype and bytes.
bool SameBytes(const Tensor& a, const Tensor& b);
// Overwrites bytes of a file in place.
void XorByteAt(const std::string& path, uint64_t offset, uint8_t mask = 0xFF);
void TruncateFileTo(const std::string& path, uint64_t size);
void WriteRawFile(const std::string& path, const std::string& bytes);
std::string ReadRawFile(const std::string& path);

}  // namespace ds::ckpt::testing
