// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF) and the
// masked form TFRecord framing stores (TensorBoard event files): rotate right by 15, add
// 0xA282EAD8.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds::monitor {

uint32_t Crc32c(const void* data, size_t size);
uint32_t MaskedCrc32c(const void* data, size_t size);

}  // namespace ds::monitor
