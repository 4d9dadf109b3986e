// Shared pieces of the testers; see tester_common.hpp.
#include "tester_common.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <memory>

namespace dsv4kv::conformance {

Backend& reference_backend() {
  static const std::unique_ptr<Backend> be = make_reference_backend();
  return *be;
}

Backend* cuda_backend(std::string* why) {
  static std::string reason;
  static const std::unique_ptr<Backend> be = make_cuda_backend(&reason);
  *why = reason;
  return be.get();
}

std::string hex_byte(uint8_t v) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02X", v);
  return s;
}

GuardedBuffer i32_buffer(const std::vector<int32_t>& v) {
  GuardedBuffer b(v.size() * sizeof(int32_t));
  for (size_t i = 0; i < v.size(); ++i) b.store<int32_t>(i, v[i]);
  return b;
}

namespace {

/// Arrays the operation does not read: arbitrary values, negatives included.
void fill_unread_visibility(Rng& r, std::vector<int32_t>& left, std::vector<int32_t>& right) {
  for (size_t t = 0; t < left.size(); ++t) {
    left[t] = static_cast<int32_t>(r.range(-3, 40));
    right[t] = static_cast<int32_t>(r.range(-3, 40));
  }
}

/// Visibility (left, right) of every position of a request from random inclusive image spans.
void image_visibility(Rng& r, int64_t seq_len, int64_t max_img, std::vector<int32_t>& left,
                      std::vector<int32_t>& right) {
  left.assign(static_cast<size_t>(std::max<int64_t>(seq_len, 0)), 0);
  right.assign(left.size(), 0);
  if (max_img <= 0 || seq_len <= 0) return;
  int64_t p = r.below(4);
  while (p < seq_len) {
    const int64_t len = r.range(1, 2 * max_img + 2);
    const int64_t s = p, e = std::min(seq_len - 1, p + len - 1);
    for (int64_t q = s; q <= e; ++q) {
      left[q] = static_cast<int32_t>(std::min(q - s, max_img - 1));
      right[q] = static_cast<int32_t>(std::min(e - q, max_img));
    }
    p = e + 1 + r.range(0, 6);
  }
}

}  // namespace

void fill_visibility(Rng& r, int64_t max_img, double invalid_fraction, const std::vector<int32_t>& qsl,
                     const std::vector<int32_t>& seq_lens, int64_t tokens, std::vector<int32_t>& left,
                     std::vector<int32_t>& right) {
  if (max_img == 0) return fill_unread_visibility(r, left, right);
  const int64_t base = qsl.empty() ? 0 : qsl[0];
  for (size_t b = 0; b < seq_lens.size(); ++b) {
    std::vector<int32_t> pl, pr;
    image_visibility(r, seq_lens[b], max_img, pl, pr);
    const int64_t q0 = qsl[b] - base, q1 = qsl[b + 1] - base;
    for (int64_t t = std::max<int64_t>(q0, 0); t < std::min<int64_t>(q1, tokens); ++t) {
      const int64_t pos = seq_lens[b] - (q1 - q0) + (t - q0);
      if (pos >= 0 && pos < static_cast<int64_t>(pl.size())) left[t] = pl[pos], right[t] = pr[pos];
    }
  }
  for (size_t t = 0; t < left.size(); ++t) {
    if (r.chance(invalid_fraction)) left[t] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, -2, INT32_MIN}));
    if (r.chance(invalid_fraction)) right[t] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, -2, INT32_MIN}));
  }
}

// ---------------------------------------------------------------------------
// GuardedBuffer and comparisons
// ---------------------------------------------------------------------------

GuardedBuffer::GuardedBuffer(size_t bytes, uint8_t fill) : storage_(bytes + 2 * kGuard, kGuardByte), size_(bytes) {
  std::memset(storage_.data() + kGuard, fill, bytes);
}

std::string GuardedBuffer::check_guards(const std::string& name) const {
  for (size_t i = 0; i < kGuard; ++i) {
    if (storage_[i] != kGuardByte)
      return name + ": guard byte " + std::to_string(kGuard - i) + " before the buffer changed to " +
             hex_byte(storage_[i]);
    const size_t j = kGuard + size_ + i;
    if (storage_[j] != kGuardByte)
      return name + ": guard byte " + std::to_string(i) + " after the buffer changed to " + hex_byte(storage_[j]);
  }
  return {};
}

std::string first_mismatch(std::span<const uint8_t> expected, std::span<const uint8_t> got, const std::string& what) {
  if (expected.size() != got.size())
    return what + ": size mismatch: expected " + std::to_string(expected.size()) + " bytes, got " +
           std::to_string(got.size());
  for (size_t i = 0; i < expected.size(); ++i)
    if (expected[i] != got[i])
      return what + ": first mismatch at byte " + std::to_string(i) + " of " + std::to_string(expected.size()) +
             ": expected " + hex_byte(expected[i]) + ", got " + hex_byte(got[i]);
  return {};
}

std::string compare_buffers(const std::vector<NamedBuffer>& expected, const std::vector<NamedBuffer>& got) {
  if (expected.size() != got.size()) return "different buffer lists";
  for (size_t i = 0; i < expected.size(); ++i) {
    // Payload first (indices relative to the tensor), then the whole storage (guards).
    std::string m = first_mismatch(expected[i].buffer->bytes(), got[i].buffer->bytes(), expected[i].name);
    if (m.empty())
      m = first_mismatch(expected[i].buffer->storage(), got[i].buffer->storage(), expected[i].name + " (with guards)");
    if (!m.empty()) return m;
  }
  return {};
}

std::string check_all_guards(const std::vector<NamedBuffer>& buffers) {
  for (const auto& b : buffers)
    if (std::string m = b.buffer->check_guards(b.name); !m.empty()) return m;
  return {};
}

std::vector<int64_t> bad_index_values(int64_t capacity) {
  return {INT32_MIN, -2, std::min<int64_t>(capacity, INT32_MAX), INT32_MAX};
}

}  // namespace dsv4kv::conformance
