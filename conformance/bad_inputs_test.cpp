// The bad-input catalogue (spec "Failure model"): for each of the five operations, every way an
// argument can be wrong, and what must happen.
//
// Each row builds a small valid case, applies one mutation, and runs it through a backend. The
// expected outcome is either
//   * a contract error: dsv4kv::Error whose message names the operation, the argument and the rule,
//     and NO byte of any buffer changed (validation happens before any write); or
//   * skip-and-count: the operation runs, error_count equals the table's value, and the outputs are
//     what the spec says (skipped rows untouched, -1 for index outputs).
// Every buffer lives inside a canary region (0xA5 margins around the tensor's extent); afterwards no
// byte outside the documented output region may have changed: margins, padding between rows,
// the cache's block tail, every input, and (for quantize/dequantize) every record or row the input
// values did not select. Quantize and dequantize outputs are also recomputed element by element from
// the spec numerics; global_topk from a direct transcription of its one-line rule. The CUDA suite
// runs the same rows on the GPU and requires byte-identical buffers and counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "backend.hpp"
#include "dsv4kv/spec.hpp"
#include "testers.hpp"

namespace dsv4kv::conformance {
namespace {

using spec::kHeadDim;
using spec::kNopeDim;
using spec::kNumTiles;
using spec::kRopeDim;
using spec::kTileSize;

constexpr uint8_t kCanary = kFillByte;  // 0xA5, as in the testers
constexpr size_t kMargin = 64;  // canary bytes before and after every tensor's extent
constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

/// An operation: its position in the table (op_table.hpp).
using Op = int;

/// The operation's full name (the first word of every contract error).
std::string op_name(Op op) {
  std::string n;
  visit_op_at(op, [&](auto t) { n = decltype(t)::type::kName; });
  return n;
}

/// The prefix of a row's test name (short names kept from before the table; a new operation uses
/// its full name).
std::string op_short(Op op) {
  static const std::pair<std::string_view, const char*> kShort[] = {
      {"quantize_and_insert_k_cache", "quantize"},        {"dequantize_and_gather_k_cache", "dequantize"},
      {"compute_global_topk_indices_and_lens", "global_topk"}, {"combine_topk_swa_indices", "combine"},
      {"build_flashinfer_mixed_sparse_indices", "mixed"}};
  const std::string n = op_name(op);
  for (const auto& [name, s] : kShort)
    if (name == n) return s;
  return n;
}

/// Bytes a view's elements span from its data pointer (TensorView::extent_bytes); 0 for absent,
/// empty and overflowing views (never allocated).
size_t view_bytes(const TensorView& v) {
  const spec::Checked e = v.extent_bytes();
  return e.ok ? static_cast<size_t>(e.value) : 0;
}

/// Mutated views whose extent exceeds this are not backed by memory: they are the hostile
/// sizes validate() must reject before any access (a row expecting a count never uses them).
constexpr size_t kMaxGrowBytes = size_t{64} << 20;

/// Calls f(byte offset from data) for every byte of every element of `v`.
template <class F>
void for_each_element_byte(const TensorView& v, F f) {
  if (!v.present() || view_bytes(v) == 0) return;
  const int es = dtype_size(v.dtype);
  int64_t idx[kMaxRank] = {0, 0, 0};
  const int nd = v.ndim;
  if (nd == 0) {
    for (int b = 0; b < es; ++b) f(int64_t{b});
    return;
  }
  while (true) {
    int64_t off = 0;
    for (int d = 0; d < nd; ++d) off += idx[d] * v.stride[d];
    for (int b = 0; b < es; ++b) f(off * es + b);
    int d = nd - 1;
    while (d >= 0 && ++idx[d] == v.shape[d]) idx[d--] = 0;
    if (d < 0) break;
  }
}

/// One tensor's allocation: kMargin canary bytes, the extent, kMargin canary bytes.
struct Buffer {
  std::vector<uint8_t> bytes;
  size_t body() const { return bytes.size() - 2 * kMargin; }
  uint8_t* data() { return bytes.data() + kMargin; }
  const uint8_t* data() const { return bytes.data() + kMargin; }
  void allocate(size_t n, uint8_t fill) {
    bytes.assign(n + 2 * kMargin, kCanary);
    std::fill(bytes.begin() + kMargin, bytes.end() - kMargin, fill);
  }
};

template <class T>
T& at(const TensorView& v, int64_t i) {
  return static_cast<T*>(v.data)[i * v.stride[0]];
}
template <class T>
T& at(const TensorView& v, int64_t i, int64_t j) {
  return static_cast<T*>(v.data)[i * v.stride[0] + j * v.stride[1]];
}
template <class T>
T& at(const TensorView& v, int64_t i, int64_t j, int64_t k) {
  return static_cast<T*>(v.data)[i * v.stride[0] + j * v.stride[1] + k * v.stride[2]];
}

/// A case: the argument structs of one operation, and the buffers their views point into.
#define DSV4KV_ARGS_TYPE(name, Args) , Args
/// One argument struct per operation of the table (std::monostate first: the list starts with a comma).
using AllArgs = std::tuple<std::monostate DSV4KV_OPS(DSV4KV_ARGS_TYPE)>;
#undef DSV4KV_ARGS_TYPE

struct Case {
  Op op;
  AllArgs all;  ///< the case uses std::get<Args>(all) of its operation
  QuantizeInsertArgs& q = std::get<QuantizeInsertArgs>(all);
  DequantizeGatherArgs& d = std::get<DequantizeGatherArgs>(all);
  GlobalTopkArgs& g = std::get<GlobalTopkArgs>(all);
  CombineArgs& c = std::get<CombineArgs>(all);
  MixedSparseArgs& x = std::get<MixedSparseArgs>(all);
  SparseGatherArgs& sg = std::get<SparseGatherArgs>(all);
  bool count_errors = true;  ///< false: pass error_count = nullptr
  size_t count_offset = 0;   ///< bytes the counter pointer is moved by (a misaligned counter)

  struct Slot {
    std::string name;
    TensorView* view;
    bool output;
    std::unique_ptr<Buffer> buf;
  };
  std::vector<Slot> slots;
  Buffer count;  ///< the int32 error counter, with canaries

  explicit Case(Op o) : op(o) { count.allocate(sizeof(int32_t), 0); }
  Case(const Case&) = delete;

  /// Allocates a canary-guarded buffer for `proto`'s extent (0xA5 for outputs, else 0) and points *field at it.
  TensorView& add(const char* name, TensorView* field, TensorView proto, bool output) {
    auto buf = std::make_unique<Buffer>();
    buf->allocate(view_bytes(proto), output ? kCanary : 0);
    proto.data = buf->data();
    *field = proto;
    slots.push_back(Slot{name, field, output, std::move(buf)});
    return *field;
  }

  /// Takes `args` (from a tester: views into the tester's buffers, scalars) as this case's
  /// arguments: every tensor gets a canary-guarded copy of its extent, named after its field.
  template <class Args>
  void adopt(const Args& args) {
    Args& mine = std::get<Args>(all);
    mine = args;
    mine.error_count = nullptr;
    Args::fields(mine, [&](const char* name, Role role, auto& member) {
      if constexpr (std::is_same_v<std::decay_t<decltype(member)>, TensorView>) {
        if (!member.present()) return;
        const void* from = member.data;
        const bool output = role == Role::kOut || role == Role::kInOut;
        add(name, &member, member, output);
        std::memcpy(member.data, from, view_bytes(member));  // the tester's outputs hold its fill, 0xA5
      }
    });
  }

  /// After a mutation: grows any buffer a mutated view no longer fits in (keeping the view's offset
  /// into it), so no backend ever reads host memory outside an allocation, whatever the mutation.
  void fit() {
    for (auto& s : slots) {
      TensorView& v = *s.view;
      if (!v.present() || v.data == nullptr) continue;
      // Addresses compared as integers: a mutated pointer may lie anywhere.
      const uintptr_t p = reinterpret_cast<uintptr_t>(v.data), b = reinterpret_cast<uintptr_t>(s.buf->data());
      if (p < b || p - b > s.buf->body()) continue;  // points elsewhere on purpose
      const size_t off = p - b, extent = view_bytes(v);
      if (extent > kMaxGrowBytes) continue;
      const size_t need = off + extent;
      if (need <= s.buf->body()) continue;
      Buffer grown;
      grown.allocate(need, kCanary);
      std::memcpy(grown.data(), s.buf->data(), s.buf->body());
      *s.buf = std::move(grown);
      v.data = s.buf->data() + off;
    }
  }

  int32_t counted() const {
    int32_t n;
    std::memcpy(&n, count.data(), sizeof n);
    return n;
  }
  Slot* slot(const std::string& name) {
    for (auto& s : slots)
      if (s.name == name) return &s;
    return nullptr;
  }
};

using CasePtr = std::unique_ptr<Case>;

// ---------------------------------------------------------------------------
// Valid base cases (small, with strided views, row padding and a block-stride tail)
// ---------------------------------------------------------------------------

constexpr int64_t kQBlockSize = 4;
constexpr int64_t kQBlocks = 3;
constexpr int64_t kQBlockStride = kQBlockSize * spec::kTokenBytes + 6;  // even, not a multiple of 16

void base_case(Case& c, QuantizeInsertArgs&) {
  // Five tokens (slot -1 is padding) into 3 blocks of block size 4 with a padded block stride; k has
  // padded rows and a sixth row past T = slot_mapping.size(0).
  c.adopt(QuantizeTester()
              .slots({9, 2, -1, 4, 11})
              .extra_k_rows(1)
              .k_row_pad(8)
              .block_size(kQBlockSize)
              .num_blocks(kQBlocks)
              .stride(kQBlockStride)
              .tight_cache_rows(true)
              .seed(11)
              .args());
  // Row 5 lies past T: NaN there would be counted if it were read.
  for (int i = 0; i < kHeadDim; ++i) at<uint16_t>(c.q.k, 5, i) = 0x7FC0;
}

constexpr int64_t kDBlockSize = 4;
constexpr int64_t kDBlocks = 5;
constexpr int64_t kDBlockStride = kDBlockSize * spec::kTokenBytes + 2;
constexpr int64_t kDOutRows = 14;

void base_case(Case& c, DequantizeGatherArgs&) {
  // Three requests over 5 blocks of block size 4 whose stride has a 2-byte tail; every cache byte is
  // random, the tail included (every (code, scale byte) pair has a defined result). out has a fourth,
  // unused batch entry and padded rows and batches; the block table has a padding column.
  GatherTester tester;  // owns the buffers adopt() copies
  DequantizeGatherArgs a = tester.lengths({7, 12, 3}, {5, 12, 3})
                               .extra_out_batch(1)
                               .out_rows(kDOutRows)
                               .out_pad(8, 8)
                               .offset(1)
                               .block_size(kDBlockSize)
                               .num_blocks(kDBlocks)
                               .stride(kDBlockStride)
                               .table(3, 0, 1)
                               .seed(22)
                               .args();
  a.k_cache.shape[1] = kDBlockSize * spec::kTokenBytes;  // rows of the block data; the tail is stride only
  a.gather_lens.shape[0] = 3;                            // one per request (the tester may add one more)
  c.adopt(a);
  // Row stride 4 > width 3: the padding column holds a valid-looking block id (0) that must never be read.
  const int32_t tab[3][4] = {{4, 1, 2, 0}, {0, 3, 2, 0}, {2, 0, 4, 0}};
  for (int b = 0; b < 3; ++b)
    for (int j = 0; j < 4; ++j) static_cast<int32_t*>(c.d.block_table.data)[b * 4 + j] = tab[b][j];
}

void base_case(Case& c, SparseGatherArgs&) {
  // Six int32 slots (one -1) over 5 blocks of block size 4 whose stride has a 2-byte tail; out has
  // one row past N and padded rows.
  SparseGatherTester tester;  // owns the buffers adopt() copies
  SparseGatherArgs a = tester.slot_list({5, -1, 13, 0, 19, 7})
                           .extra_rows(1)
                           .out_pad(8)
                           .block_size(kDBlockSize)
                           .num_blocks(kDBlocks)
                           .stride(kDBlockStride)
                           .seed(66)
                           .args();
  a.k_cache.shape[1] = kDBlockSize * spec::kTokenBytes;  // rows of the block data; the tail is stride only
  c.adopt(a);
}

constexpr int64_t kGBlockSize = 4;

void base_case(Case& c, GlobalTopkArgs&) {
  // Four tokens of two requests, padded rows in topk_indices (8 > 6), the block table (5 > 3) and
  // the output (7 > 6).
  GlobalTopkTester tester;  // owns the buffers adopt() copies
  GlobalTopkArgs a =
      tester.tokens(4).topk(6).row_pads(2, 1).requests(2).block_size(kGBlockSize).table(3, 2).seed(33).args();
  a.token_to_req.shape[0] = a.is_valid_token.shape[0] = 4;  // one per token (the tester may add more)
  c.adopt(a);
  const int32_t topk[4][6] = {{0, 5, -1, 11, 3, 7}, {2, -1, 8, 4, 10, -1}, {1, 6, 9, -1, -1, 0}, {-1, 4, 11, 2, -1, -1}};
  for (int t = 0; t < 4; ++t)
    for (int j = 0; j < 6; ++j) at<int32_t>(c.g.topk_indices, t, j) = topk[t][j];
  const int32_t req[4] = {0, 1, 1, 0};
  const uint8_t valid[4] = {1, 1, 0, 1};
  for (int t = 0; t < 4; ++t) at<int32_t>(c.g.token_to_req, t) = req[t], at<uint8_t>(c.g.is_valid_token, t) = valid[t];
  const int32_t tab[2][5] = {{7, 2, 9, 3, 4}, {1, 0, 5, 3, 4}};  // columns 3, 4: row padding, never read
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 5; ++j) static_cast<int32_t*>(c.g.block_table.data)[b * 5 + j] = tab[b][j];
}

void base_case(Case& c, CombineArgs&) {
  // Two requests: tokens 0-1 (seq_len 6, gather_len 5) and tokens 2-4 (seq_len 9, gather_len 9);
  // query_start_loc starts at 10 (the op rebases by it); output rows padded by 2.
  CombineTester tester;  // owns the buffers adopt() copies
  CombineArgs a = tester.layout({10, 12, 15}, {6, 9}, {5, 9})
                      .window(4)
                      .compress_ratio(2)
                      .topk(3)
                      .topk_pad(1)
                      .max_image_tokens(2)
                      .visibility(true)
                      .out_row_pad(2)
                      .seed(44)
                      .args();
  a.M = 100;
  a.N = 20;
  a.left_visible.shape[0] = a.right_visible.shape[0] = 5;  // one per token (the tester may add one more)
  c.adopt(a);
  const int32_t topk[5][4] = {{5, 12, 9, 1}, {-1, 0, 17, 2}, {3, 0, 15, 7}, {-1, 19, 4, 2}, {8, 11, -1, 6}};
  for (int t = 0; t < 5; ++t)
    for (int j = 0; j < 4; ++j) at<int32_t>(c.c.topk_indices, t, j) = topk[t][j];
  const int32_t left[5] = {0, 1, 0, 2, 1}, right[5] = {1, 0, 0, 0, 1};
  for (int t = 0; t < 5; ++t) at<int32_t>(c.c.left_visible, t) = left[t], at<int32_t>(c.c.right_visible, t) = right[t];
}

constexpr int64_t kXWidth = 5 + 2 + 8;  // swa_width + image_width + round_up(max(topk 5, dct 3), 4)

void base_case(Case& c, MixedSparseArgs&) {
  // Decode tokens 0 (request 0) and 1 (request 1); prefill tokens 2-4 (request 2, positions 7-9).
  // decode_swa_indices, both block tables and the output have padded rows.
  MixedSparseTester tester;  // owns the buffers adopt() copies
  MixedSparseArgs a = tester.decode_requests(2)
                          .layout({0, 1, 2, 5}, {9, 7, 10})
                          .window(4)
                          .swa_width_pad(1)
                          .swa_row_pad(1)
                          .compress_ratio(2)
                          .topk(5)
                          .prefill_cols(6)
                          .decode_topk(3)
                          .decode_lens(true)
                          .local(true)
                          .block_sizes(4, 2)
                          .spans(6, 0)
                          .separate_compressed_table(true)
                          .tables(4, 1, 3, 1)
                          .max_image_tokens(2)
                          .visibility(true)
                          .out_row_pad(1)
                          .seed(55)
                          .args();
  // One entry per decode token / per token (the tester may add one more).
  a.decode_compressed_topk_lens.shape[0] = a.decode_is_valid_token.shape[0] = 2;
  a.token_to_req.shape[0] = a.prefill_left_visible.shape[0] = a.prefill_right_visible.shape[0] = 5;
  c.adopt(a);
  MixedSparseArgs& x = c.x;
  const int32_t sw[2][5] = {{0, 5, -1, 13, 22}, {7, -1, 30, 2, 9}};
  const int32_t cm[2][3] = {{1, -1, 4}, {0, 5, 3}};
  for (int t = 0; t < 2; ++t) {
    for (int j = 0; j < 5; ++j) at<int32_t>(x.decode_swa_indices, t, j) = sw[t][j];
    for (int j = 0; j < 3; ++j) at<int32_t>(x.decode_compressed_indices, t, j) = cm[t][j];
    at<uint8_t>(x.decode_is_valid_token, t) = 1;
  }
  at<int32_t>(x.decode_compressed_topk_lens, 0) = 2, at<int32_t>(x.decode_compressed_topk_lens, 1) = 3;
  const int32_t ptk[3][6] = {{0, 3, -1, 5, 2, 1}, {4, 1, 2, -1, 0, 3}, {5, 0, 1, 2, 3, 4}};
  for (int t = 0; t < 3; ++t)
    for (int j = 0; j < 6; ++j) at<int32_t>(x.prefill_topk_indices, t, j) = ptk[t][j];
  const int32_t req[5] = {0, 1, 2, 2, 2}, left[5] = {0, 0, 1, 5, 0}, right[5] = {0, 0, 0, 1, 0};
  for (int t = 0; t < 5; ++t) {
    at<int32_t>(x.token_to_req, t) = req[t];
    at<int32_t>(x.prefill_left_visible, t) = left[t], at<int32_t>(x.prefill_right_visible, t) = right[t];
  }
  // Block tables, their padding columns included (never read).
  const int32_t st[3][5] = {{3, 8, 1, 6, 0}, {2, 5, 0, 7, 0}, {4, 9, 2, 11, 0}};
  const int32_t ct[3][4] = {{5, 1, 3, 0}, {0, 2, 4, 0}, {6, 7, 8, 0}};
  for (int b = 0; b < 3; ++b) {
    for (int j = 0; j < 5; ++j) static_cast<int32_t*>(x.swa_block_table.data)[b * 5 + j] = st[b][j];
    for (int j = 0; j < 4; ++j) static_cast<int32_t*>(x.compressed_block_table.data)[b * 4 + j] = ct[b][j];
  }
}

/// The valid base case of `op`.
CasePtr build(Op op) {
  auto c = std::make_unique<Case>(op);
  visit_op_at(op, [&](auto t) { base_case(*c, std::get<typename decltype(t)::type>(c->all)); });
  return c;
}

void run(Backend& be, Case& c) {
  int32_t* n = c.count_errors ? reinterpret_cast<int32_t*>(c.count.data() + c.count_offset) : nullptr;
  visit_op_at(c.op, [&](auto t) {
    auto& args = std::get<typename decltype(t)::type>(c.all);
    args.error_count = n;
    run_op(be, args);
  });
}

/// The tensor outputs (Role::kOut) of the case's operation, in field order.
std::vector<const TensorView*> outputs(const Case& c) {
  std::vector<const TensorView*> v;
  visit_op_at(c.op, [&](auto t) {
    using Args = typename decltype(t)::type;
    Args::fields(std::get<Args>(c.all), [&](const char*, Role role, const auto& m) {
      if constexpr (std::is_same_v<std::decay_t<decltype(m)>, TensorView>)
        if (role == Role::kOut) v.push_back(&m);
    });
  });
  return v;
}

// ---------------------------------------------------------------------------
// The documented output region, and the spec's values inside it
// ---------------------------------------------------------------------------

/// Per slot (and the counter, last), which body bytes the operation may write.
using Allowed = std::vector<std::vector<bool>>;

Allowed allowed_region(Case& c) {
  Allowed a;
  for (auto& s : c.slots) a.emplace_back(s.buf->body(), false);
  auto mark_view = [&](size_t i) {
    const TensorView& v = *c.slots[i].view;
    const ptrdiff_t off = static_cast<uint8_t*>(v.data) - c.slots[i].buf->data();
    for_each_element_byte(v, [&](int64_t b) { a[i][static_cast<size_t>(off + b)] = true; });
  };
  auto index_of = [&](const TensorView* v) {
    for (size_t i = 0; i < c.slots.size(); ++i)
      if (c.slots[i].view == v) return i;
    return c.slots.size();
  };
  if (c.op == op_index<QuantizeInsertArgs>) {
    {
      const size_t ci = index_of(&c.q.k_cache);
      const CacheGeometry g = validate(c.q);
      const int64_t T = c.q.slot_mapping.shape[0];
      const ptrdiff_t base = g.base - c.slots[ci].buf->data();
      for (int64_t t = 0; t < T; ++t) {
        const int64_t s = at<int64_t>(c.q.slot_mapping, t);
        if (s < 0 || s / g.block_size >= g.num_blocks) continue;
        const int64_t blk = s / g.block_size, pos = s % g.block_size;
        const int64_t b0 = base + spec::block_offset(blk, g.block_stride);
        for (int64_t i = 0; i < spec::kTokenDataBytes; ++i) a[ci][b0 + spec::token_data_offset(pos) + i] = true;
        for (int j = 0; j < spec::kScaleBytesPerToken; ++j) a[ci][b0 + spec::scale_offset(g.block_size, pos, j)] = true;
      }
    }
  } else if (c.op == op_index<DequantizeGatherArgs>) {
    {
      const size_t oi = index_of(&c.d.out);
      const DequantizeGatherArgs& d = c.d;
      const CacheGeometry g = validate(d);
      const ptrdiff_t base = static_cast<uint8_t*>(d.out.data) - c.slots[oi].buf->data();
      const int64_t R = d.seq_lens.shape[0];
      for (int64_t b = 0; b < R; ++b) {
        const int64_t sl = at<int32_t>(d.seq_lens, b);
        const int64_t gl = d.gather_lens.present() ? at<int32_t>(d.gather_lens, b) : sl;
        if (sl < 0 || gl < 0 || gl > sl) continue;
        const int64_t rows = std::min(gl, d.out.shape[1] - d.offset);
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t pos = sl - gl + i, col = pos / g.block_size;
          if (col >= d.block_table.shape[1]) continue;
          const int64_t blk = at<int32_t>(d.block_table, b, col);
          if (blk < 0 || blk >= g.num_blocks) continue;
          const int64_t row = (b * d.out.stride[0] + (d.offset + i) * d.out.stride[1]) * 2;
          for (int64_t k = 0; k < kHeadDim * 2; ++k) a[oi][base + row + k] = true;
        }
      }
    }
  } else if (c.op == op_index<SparseGatherArgs>) {
    const size_t oi = index_of(&c.sg.out);
    const CacheGeometry g = validate(c.sg);
    const ptrdiff_t base = static_cast<uint8_t*>(c.sg.out.data) - c.slots[oi].buf->data();
    for (int64_t i = 0; i < c.sg.slot_indices.shape[0]; ++i) {
      const int64_t s = c.sg.slot_indices.dtype == DType::kI64 ? at<int64_t>(c.sg.slot_indices, i)
                                                                : int64_t{at<int32_t>(c.sg.slot_indices, i)};
      if (s < 0 || s / g.block_size >= g.num_blocks) continue;
      for (int64_t k = 0; k < kHeadDim * 2; ++k) a[oi][base + i * c.sg.out.stride[0] * 2 + k] = true;
    }
  } else {
    // The index operations may write anywhere in their outputs.
    for (const TensorView* v : outputs(c)) mark_view(index_of(v));
  }
  a.emplace_back(sizeof(int32_t), c.count_errors);
  return a;
}

/// Bytes of every buffer (slots, then the counter).
std::vector<std::vector<uint8_t>> snapshot(const Case& c) {
  std::vector<std::vector<uint8_t>> s;
  for (auto& sl : c.slots) s.push_back(sl.buf->bytes);
  s.push_back(c.count.bytes);
  return s;
}

std::string buffer_name(const Case& c, size_t i) { return i < c.slots.size() ? c.slots[i].name : "error_count"; }

/// Every byte outside `allowed` (all bytes when `allowed` is null) equals `before`.
::testing::AssertionResult untouched_outside(const Case& c, const std::vector<std::vector<uint8_t>>& before,
                                             const Allowed* allowed) {
  const auto after = snapshot(c);
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i].size() != before[i].size()) return ::testing::AssertionFailure() << buffer_name(c, i) << " resized";
    for (size_t j = 0; j < after[i].size(); ++j) {
      if (after[i][j] == before[i][j]) continue;
      const bool in_body = j >= kMargin && j < after[i].size() - kMargin;
      if (in_body && allowed && (*allowed)[i][j - kMargin]) continue;
      return ::testing::AssertionFailure()
             << "byte " << static_cast<ptrdiff_t>(j) - static_cast<ptrdiff_t>(kMargin) << " of " << buffer_name(c, i)
             << (in_body ? " (outside the documented output region)" : " (canary margin)") << " changed from 0x"
             << std::hex << int{before[i][j]} << " to 0x" << int{after[i][j]};
    }
  }
  return ::testing::AssertionSuccess();
}

/// Quantize: every selected record holds the spec's bytes; returns the spec's error count.
int64_t check_quantize_values(Case& c) {
  const QuantizeInsertArgs& q = c.q;
  const CacheGeometry g = validate(q);
  const int64_t T = q.slot_mapping.shape[0];
  int64_t errors = 0;
  std::vector<int64_t> last(static_cast<size_t>(g.num_blocks * g.block_size), -1);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = at<int64_t>(q.slot_mapping, t);
    if (s == -1) continue;
    if (s < 0 || s / g.block_size >= g.num_blocks) {
      ++errors;
      continue;
    }
    last[static_cast<size_t>(s)] = t;
    for (int i = 0; i < kNopeDim; ++i) errors += spec::bf16_is_nonfinite(at<uint16_t>(q.k, t, i));
  }
  for (size_t s = 0; s < last.size(); ++s) {
    const int64_t t = last[s];
    if (t < 0) continue;
    const int64_t blk = static_cast<int64_t>(s) / g.block_size, pos = static_cast<int64_t>(s) % g.block_size;
    const uint8_t* block = g.base + spec::block_offset(blk, g.block_stride);
    for (int j = 0; j < kNumTiles; ++j) {
      float amax = 0.0f;
      for (int i = 0; i < kTileSize; ++i) {
        const uint16_t x = at<uint16_t>(q.k, t, j * kTileSize + i);
        if (!spec::bf16_is_nan(x)) amax = std::max(amax, spec::bf16_to_f32(spec::bf16_abs_bits(x)));
      }
      const spec::TileScale ts = spec::tile_scale(amax, q.format);
      EXPECT_EQ(int{block[spec::scale_offset(g.block_size, pos, j)]}, int{ts.byte}) << "slot " << s << " tile " << j;
      for (int i = 0; i < kTileSize; ++i) {
        const int e = j * kTileSize + i;
        const uint8_t want = spec::quantize_element(at<uint16_t>(q.k, t, e), ts, q.format);
        const uint8_t got = block[spec::fp8_code_offset(pos, e)];
        if (got != want) {
          ADD_FAILURE() << "slot " << s << " code " << e << ": want 0x" << std::hex << int{want} << " got 0x" << int{got};
          return errors;
        }
      }
    }
    EXPECT_EQ(int{block[spec::scale_offset(g.block_size, pos, spec::kScalePadIndex)]}, 0) << "pad byte, slot " << s;
    EXPECT_EQ(std::memcmp(block + spec::rope_offset(pos), &at<uint16_t>(q.k, t, kNopeDim), spec::kRopeBytes), 0)
        << "RoPE bytes of slot " << s;
  }
  return errors;
}

/// Row `got(e)` (e = 0 .. 511) holds the token at position `p` of `block` per the spec (NoPE values
/// dequantized, RoPE bits copied); otherwise one failure naming `where` + "e]" and false.
template <class Got>
bool token_row_matches(const uint8_t* block, int64_t block_size, int64_t p, Fp8Format format, Got got,
                       const std::string& where) {
  for (int e = 0; e < kHeadDim; ++e) {
    uint16_t want;
    if (e < kNopeDim)
      want = spec::dequantize_element(block[spec::fp8_code_offset(p, e)],
                                      block[spec::scale_offset(block_size, p, e / kTileSize)], format);
    else
      std::memcpy(&want, block + spec::rope_offset(p) + (e - kNopeDim) * 2, 2);
    if (got(e) != want) {
      ADD_FAILURE() << where << e << "]: want 0x" << std::hex << want << " got 0x" << got(e);
      return false;
    }
  }
  return true;
}

/// Dequantize: every selected row holds the spec's values; returns the spec's error count.
int64_t check_dequantize_values(Case& c) {
  const DequantizeGatherArgs& d = c.d;
  const CacheGeometry g = validate(d);
  const int64_t R = d.seq_lens.shape[0];
  int64_t errors = 0;
  for (int64_t b = 0; b < R; ++b) {
    const int64_t sl = at<int32_t>(d.seq_lens, b);
    const int64_t gl = d.gather_lens.present() ? at<int32_t>(d.gather_lens, b) : sl;
    if (sl < 0 || gl < 0 || gl > sl) {
      ++errors;
      continue;
    }
    const int64_t rows = std::max<int64_t>(0, std::min(gl, d.out.shape[1] - d.offset));
    errors += gl - rows;  // rows past the end of out
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t pos = sl - gl + i, col = pos / g.block_size;
      if (col >= d.block_table.shape[1]) {
        ++errors;
        continue;
      }
      const int64_t blk = at<int32_t>(d.block_table, b, col);
      if (blk < 0 || blk >= g.num_blocks) {
        ++errors;
        continue;
      }
      const uint8_t* block = g.base + spec::block_offset(blk, g.block_stride);
      if (!token_row_matches(block, g.block_size, pos % g.block_size, d.format,
                             [&](int e) { return at<uint16_t>(d.out, b, d.offset + i, e); },
                             "out[" + std::to_string(b) + ", " + std::to_string(d.offset + i) + ", "))
        return errors;
    }
  }
  return errors;
}

/// Sparse gather: every row of a slot inside the cache holds its token; returns the spec's error count.
int64_t check_sparse_gather_values(Case& c) {
  const SparseGatherArgs& d = c.sg;
  const CacheGeometry g = validate(d);
  int64_t errors = 0;
  for (int64_t i = 0; i < d.slot_indices.shape[0]; ++i) {
    const int64_t s = d.slot_indices.dtype == DType::kI64 ? at<int64_t>(d.slot_indices, i)
                                                           : int64_t{at<int32_t>(d.slot_indices, i)};
    if (s == -1) continue;
    if (s < 0 || s / g.block_size >= g.num_blocks) {
      ++errors;
      continue;
    }
    const uint8_t* block = g.base + spec::block_offset(s / g.block_size, g.block_stride);
    if (!token_row_matches(block, g.block_size, s % g.block_size, d.format,
                           [&](int e) { return at<uint16_t>(d.out, i, e); }, "out[" + std::to_string(i) + ", "))
      return errors;
  }
  return errors;
}

/// Global top-k: the whole output from its one-line rule; returns the spec's error count.
int64_t check_global_topk_values(Case& c) {
  const GlobalTopkArgs& g = c.g;
  const int64_t T = g.topk_indices.shape[0], K = g.topk_indices.shape[1];
  const int64_t R = g.block_table.shape[0], cols = g.block_table.shape[1], B = g.block_size;
  int64_t errors = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t r = at<int32_t>(g.token_to_req, t);
    const bool bad_req = r < 0 || r >= R;
    errors += bad_req;
    int32_t n = 0;
    for (int64_t j = 0; j < K; ++j) {
      int64_t want = -1;
      const int64_t local = at<int32_t>(g.topk_indices, t, j);
      if (!bad_req && local >= 0) {
        const int64_t col = local / B;
        const int64_t blk = col < cols ? at<int32_t>(g.block_table, r, col) : -1;
        want = blk >= 0 ? blk * B + local % B : -1;
        if (want > kI32Max) want = -1;
        errors += want < 0;
      }
      n += want >= 0;
      EXPECT_EQ(at<int32_t>(g.global_topk_indices, t, j), want) << "global_topk_indices[" << t << ", " << j << "]";
    }
    EXPECT_EQ(at<int32_t>(g.topk_lens, t), bad_req || !at<uint8_t>(g.is_valid_token, t) ? 0 : n) << "topk_lens[" << t << "]";
  }
  return errors;
}

// ---------------------------------------------------------------------------
// Row checks for the index operations
// ---------------------------------------------------------------------------

/// An index operation's outputs: its index matrix, then its lengths.
const TensorView& index_out(const Case& c) { return *outputs(c).at(0); }
const TensorView& lens_out(const Case& c) { return *outputs(c).at(1); }

/// Row t of the index output is all -1 and its length 0.
void expect_dead_row(const Case& c, int64_t t) {
  const TensorView& o = index_out(c);
  for (int64_t j = 0; j < o.shape[1]; ++j) EXPECT_EQ(at<int32_t>(o, t, j), -1) << "row " << t << " column " << j;
  EXPECT_EQ(at<int32_t>(lens_out(c), t), 0) << "length of row " << t;
}

/// Row t equals the unmutated run's row t (indices and length).
void expect_base_row(const Case& c, const Case& base, int64_t t) {
  const TensorView &o = index_out(c), &ob = index_out(base);
  for (int64_t j = 0; j < o.shape[1]; ++j)
    EXPECT_EQ(at<int32_t>(o, t, j), at<int32_t>(ob, t, j)) << "row " << t << " column " << j << " (vs. unmutated)";
  EXPECT_EQ(at<int32_t>(lens_out(c), t), at<int32_t>(lens_out(base), t)) << "length of row " << t << " (vs. unmutated)";
}

/// Every row equals the unmutated run except cells listed as {t, j, value}.
struct Cell {
  int64_t t, j;
  int32_t value;
};
void expect_base_except(const Case& c, const Case& base, std::vector<Cell> cells, std::vector<std::pair<int64_t, int32_t>> lens = {}) {
  const TensorView &o = index_out(c), &ob = index_out(base);
  for (int64_t t = 0; t < o.shape[0]; ++t) {
    for (int64_t j = 0; j < o.shape[1]; ++j) {
      int32_t want = at<int32_t>(ob, t, j);
      for (auto& cell : cells)
        if (cell.t == t && cell.j == j) want = cell.value;
      EXPECT_EQ(at<int32_t>(o, t, j), want) << "row " << t << " column " << j;
    }
    int32_t want = at<int32_t>(lens_out(base), t);
    for (auto& l : lens)
      if (l.first == t) want = l.second;
    EXPECT_EQ(at<int32_t>(lens_out(c), t), want) << "length of row " << t;
  }
}

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

using CaseFn = std::function<void(Case&)>;
using CheckFn = std::function<void(const Case& after, const Case& unmutated_after)>;

struct Row {
  std::string name;
  Op op;
  CaseFn mutate;
  std::vector<std::string> error;  ///< non-empty: contract error whose message holds each fragment
  int32_t count = 0;               ///< skip-and-count: expected error_count
  CaseFn sanitize;                 ///< optional: an equivalent valid input that must give the same bytes, count 0
  CheckFn check;                   ///< optional: row-specific expectations on the outputs
};

Row contract(Op op, std::string name, CaseFn m, std::vector<std::string> fragments) {
  return Row{std::move(name), op, std::move(m), std::move(fragments), 0, nullptr, nullptr};
}
Row skip(Op op, std::string name, CaseFn m, int32_t count, CaseFn sanitize = nullptr, CheckFn check = nullptr) {
  return Row{std::move(name), op, std::move(m), {}, count, std::move(sanitize), std::move(check)};
}

void misalign(TensorView& v, int bytes) { v.data = static_cast<uint8_t*>(v.data) + bytes; }
void rank(TensorView& v, int n) {
  if (n > v.ndim) {
    for (int d = v.ndim; d < n; ++d) v.shape[d] = 1, v.stride[d] = 1;
  }
  v.ndim = n;
}

void add_quantize_rows(std::vector<Row>& t) {
  const Op Q = op_index<QuantizeInsertArgs>;
  auto k_row_nan = [](Case& c, int64_t row, std::initializer_list<std::pair<int, uint16_t>> v) {
    for (auto& [i, bits] : v) at<uint16_t>(c.q.k, row, i) = bits;
  };
  // Contract errors.
  t.push_back(contract(Q, "k_dtype", [](Case& c) { c.q.k.dtype = DType::kI32; }, {"k must be bfloat16, got int32"}));
  t.push_back(contract(Q, "k_rank3", [](Case& c) { rank(c.q.k, 3); }, {"k must have rank 2, got 3"}));
  t.push_back(contract(Q, "k_448_columns", [](Case& c) { c.q.k.shape[1] = kNopeDim; }, {"k must have 512 columns, got 448"}));
  t.push_back(contract(Q, "k_inner_stride", [](Case& c) { c.q.k.stride[1] = 2; },
                       {"k must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(Q, "k_misaligned", [](Case& c) { misalign(c.q.k, 1); }, {"k must be aligned to 2 bytes"}));
  t.push_back(contract(Q, "k_negative_rows", [](Case& c) { c.q.k.shape[0] = -1; }, {"k has a negative size in dimension 0"}));
  t.push_back(contract(Q, "k_negative_stride", [](Case& c) { c.q.k.stride[0] = -520; },
                       {"k has a negative stride in dimension 0"}));
  t.push_back(contract(Q, "k_missing", [](Case& c) { c.q.k = TensorView{}; }, {"k is required"}));
  t.push_back(contract(Q, "k_null_data", [](Case& c) { c.q.k.data = nullptr; },
                       {"k is non-empty but has a null data pointer"}));
  t.push_back(contract(Q, "slot_mapping_int32", [](Case& c) { c.q.slot_mapping.dtype = DType::kI32; },
                       {"slot_mapping must be int64, got int32"}));
  t.push_back(contract(Q, "slot_mapping_rank2", [](Case& c) { rank(c.q.slot_mapping, 2); },
                       {"slot_mapping must have rank 1, got 2"}));
  t.push_back(contract(Q, "slot_mapping_longer_than_k", [](Case& c) { c.q.k.shape[0] = 4; },
                       {"slot_mapping must not have more entries (5) than k has rows (4)"}));
  t.push_back(contract(Q, "slot_mapping_misaligned", [](Case& c) { misalign(c.q.slot_mapping, 4); },
                       {"slot_mapping must be aligned to 8 bytes"}));
  t.push_back(contract(Q, "slot_mapping_stride2", [](Case& c) { c.q.slot_mapping.stride[0] = 2; },
                       {"slot_mapping must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(Q, "slot_mapping_missing", [](Case& c) { c.q.slot_mapping = TensorView{}; },
                       {"slot_mapping is required"}));
  t.push_back(contract(Q, "k_cache_missing", [](Case& c) { c.q.k_cache = TensorView{}; }, {"k_cache is required"}));
  t.push_back(contract(Q, "k_cache_int32", [](Case& c) { c.q.k_cache.dtype = DType::kI32; },
                       {"k_cache must be uint8, got int32"}));
  t.push_back(contract(Q, "k_cache_rank1", [](Case& c) { rank(c.q.k_cache, 1); }, {"k_cache must have rank 2 or 3, got 1"}));
  t.push_back(contract(Q, "k_cache_block_too_small", [](Case& c) { c.q.k_cache.shape[1] -= 2; },
                       {"k_cache must hold at least block_size*584 = 2336 bytes per block, got 2334"}));
  t.push_back(contract(Q, "block_stride_below_block_data", [](Case& c) { c.q.k_cache.stride[0] = 2334; },
                       {"k_cache block stride must be >= block_size*584 = 2336 bytes, got 2334"}));
  t.push_back(contract(Q, "block_stride_odd", [](Case& c) { c.q.k_cache.stride[0] = kQBlockStride + 1; },
                       {"k_cache block stride must be even"}));
  t.push_back(contract(Q, "k_cache_rank3_not_contiguous",
                       [](Case& c) {
                         TensorView& v = c.q.k_cache;
                         v.ndim = 3;
                         v.shape = {kQBlocks, kQBlockSize, spec::kTokenBytes};
                         v.stride = {kQBlockStride, spec::kTokenBytes + 16, 1};
                       },
                       {"k_cache must be contiguous within a block (stride of dimension 1 must be 584, got 600)"}));
  t.push_back(contract(Q, "k_cache_negative_blocks", [](Case& c) { c.q.k_cache.shape[0] = -3; },
                       {"k_cache has a negative size in dimension 0"}));
  t.push_back(contract(Q, "block_size_0", [](Case& c) { c.q.block_size = 0; }, {"block_size must be >= 1, got 0"}));
  t.push_back(contract(Q, "block_size_negative", [](Case& c) { c.q.block_size = -4; }, {"block_size must be >= 1, got -4"}));
  t.push_back(contract(Q, "block_size_larger_than_cache_blocks", [](Case& c) { c.q.block_size = 5; },
                       {"k_cache must hold at least block_size*584 = 2920 bytes per block, got 2336"}));
  t.push_back(contract(Q, "block_size_beyond_int32", [](Case& c) { c.q.block_size = int64_t{1} << 62; },
                       {"block_size must fit in int32"}));
  t.push_back(contract(Q, "is_ue8m0_false", [](Case& c) { c.q.is_ue8m0 = false; }, {"is_ue8m0 must be true"}));

  // Skip and count: slot values only the device sees.
  auto slot = [](int i, int64_t v) { return [i, v](Case& c) { at<int64_t>(c.q.slot_mapping, i) = v; }; };
  t.push_back(skip(Q, "slot_int64_min", slot(1, kI64Min), 1, slot(1, -1)));
  t.push_back(skip(Q, "slot_minus2", slot(1, -2), 1, slot(1, -1)));
  t.push_back(skip(Q, "slot_at_capacity", slot(3, kQBlocks * kQBlockSize), 1, slot(3, -1)));
  t.push_back(skip(Q, "slot_int64_max", slot(0, kI64Max), 1, slot(0, -1)));
  t.push_back(skip(Q, "slot_far_block", slot(4, kQBlockSize * 1000 + 3), 1, slot(4, -1)));
  t.push_back(skip(Q, "slot_block_index_overflows_int32", slot(4, (int64_t{1} << 33) * kQBlockSize + 1), 1, slot(4, -1)));
  t.push_back(skip(Q, "slots_all_padding",
                   [](Case& c) {
                     for (int i = 0; i < 5; ++i) at<int64_t>(c.q.slot_mapping, i) = -1;
                   },
                   0));
  t.push_back(skip(Q, "two_bad_slots_one_padding",
                   [](Case& c) { at<int64_t>(c.q.slot_mapping, 0) = -3, at<int64_t>(c.q.slot_mapping, 1) = 12; }, 2,
                   [](Case& c) { at<int64_t>(c.q.slot_mapping, 0) = -1, at<int64_t>(c.q.slot_mapping, 1) = -1; }));
  t.push_back(skip(Q, "boundary_slots_valid",
                   [](Case& c) {
                     // First and last slot of the cache, kept unique (duplicate slots are unspecified on the GPU).
                     at<int64_t>(c.q.slot_mapping, 0) = 0, at<int64_t>(c.q.slot_mapping, 1) = 11;
                     at<int64_t>(c.q.slot_mapping, 4) = 2;
                   }, 0));
  t.push_back(skip(Q, "nan_and_inf_in_nope",
                   [=](Case& c) { k_row_nan(c, 0, {{3, 0x7FC0}, {100, 0x7F80}, {101, 0xFF80}, {447, 0xFFC1}}); }, 4));
  t.push_back(skip(Q, "all_nan_tile", [=](Case& c) {
                     for (int i = 64; i < 128; ++i) at<uint16_t>(c.q.k, 1, i) = 0x7FC0;
                   }, 64));
  t.push_back(skip(Q, "nan_in_rope_not_counted", [=](Case& c) { k_row_nan(c, 0, {{448, 0x7FC0}, {511, 0xFF80}}); }, 0));
  t.push_back(skip(Q, "nan_in_padding_token_not_counted", [=](Case& c) { k_row_nan(c, 2, {{0, 0x7FC0}, {5, 0x7F80}}); }, 0));
  t.push_back(skip(Q, "nan_in_bad_slot_token_counts_slot_only",
                   [=](Case& c) {
                     k_row_nan(c, 1, {{0, 0x7FC0}, {5, 0x7F80}});
                     at<int64_t>(c.q.slot_mapping, 1) = -2;
                   },
                   1));
  t.push_back(skip(Q, "rows_past_T_not_read", [=](Case& c) {
                     for (int i = 0; i < kHeadDim; ++i) at<uint16_t>(c.q.k, 5, i) = 0x7F80;
                   }, 0));
  t.push_back(skip(Q, "no_tokens", [](Case& c) { c.q.slot_mapping.shape[0] = 0; }, 0));
  t.push_back(skip(Q, "no_blocks_every_slot_counted", [](Case& c) { c.q.k_cache.shape[0] = 0; }, 4));
  t.push_back(skip(Q, "fnuz_bad_slot", [](Case& c) { c.q.format = Fp8Format::kE4M3Fnuz, at<int64_t>(c.q.slot_mapping, 3) = -7; },
                   1, [](Case& c) { at<int64_t>(c.q.slot_mapping, 3) = -1; }));
  t.push_back(skip(Q, "rank3_cache_valid",
                   [](Case& c) {
                     TensorView& v = c.q.k_cache;
                     v.ndim = 3;
                     v.shape = {kQBlocks, kQBlockSize, spec::kTokenBytes};
                     v.stride = {kQBlockStride, spec::kTokenBytes, 1};
                   },
                   0));
  t.push_back(skip(Q, "no_counter_bad_slot",
                   [](Case& c) { c.count_errors = false, at<int64_t>(c.q.slot_mapping, 1) = kI64Min; }, 0,
                   [](Case& c) { c.count_errors = true, at<int64_t>(c.q.slot_mapping, 1) = -1; }));
}

void add_dequantize_rows(std::vector<Row>& t) {
  const Op D = op_index<DequantizeGatherArgs>;
  t.push_back(contract(D, "out_dtype", [](Case& c) { c.d.out.dtype = DType::kI32; }, {"out must be bfloat16, got int32"}));
  t.push_back(contract(D, "out_rank2", [](Case& c) { rank(c.d.out, 2); }, {"out must have rank 3, got 2"}));
  t.push_back(contract(D, "out_448_columns", [](Case& c) { c.d.out.shape[2] = kNopeDim; },
                       {"out must have 512 columns, got 448"}));
  t.push_back(contract(D, "out_inner_stride", [](Case& c) { c.d.out.stride[2] = 2; },
                       {"out must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(D, "out_misaligned", [](Case& c) { misalign(c.d.out, 1); }, {"out must be aligned to 2 bytes"}));
  t.push_back(contract(D, "out_fewer_than_R", [](Case& c) { c.d.out.shape[0] = 2; },
                       {"out must have at least 3 rows in dimension 0 (one per request), got 2"}));
  t.push_back(contract(D, "out_negative_rows", [](Case& c) { c.d.out.shape[1] = -1; },
                       {"out has a negative size in dimension 1: -1"}));
  t.push_back(contract(D, "out_missing", [](Case& c) { c.d.out = TensorView{}; }, {"out is required"}));
  t.push_back(contract(D, "seq_lens_int64", [](Case& c) { c.d.seq_lens.dtype = DType::kI64; },
                       {"seq_lens must be int32, got int64"}));
  t.push_back(contract(D, "seq_lens_missing", [](Case& c) { c.d.seq_lens = TensorView{}; }, {"seq_lens is required"}));
  t.push_back(contract(D, "seq_lens_rank2", [](Case& c) { rank(c.d.seq_lens, 2); }, {"seq_lens must have rank 1, got 2"}));
  t.push_back(contract(D, "seq_lens_misaligned", [](Case& c) { misalign(c.d.seq_lens, 2); },
                       {"seq_lens must be aligned to 4 bytes"}));
  t.push_back(contract(D, "seq_lens_stride2", [](Case& c) { c.d.seq_lens.stride[0] = 2; },
                       {"seq_lens must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(D, "gather_lens_short", [](Case& c) { c.d.gather_lens.shape[0] = 2; },
                       {"gather_lens must have at least 3 entries (one per request), got 2"}));
  t.push_back(contract(D, "gather_lens_bool", [](Case& c) { c.d.gather_lens.dtype = DType::kBool; },
                       {"gather_lens must be int32, got bool"}));
  t.push_back(contract(D, "block_table_short", [](Case& c) { c.d.block_table.shape[0] = 2; },
                       {"block_table must have at least 3 rows (one per request), got 2"}));
  t.push_back(contract(D, "block_table_inner_stride", [](Case& c) { c.d.block_table.stride[1] = 2; },
                       {"block_table must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(D, "block_table_misaligned", [](Case& c) { misalign(c.d.block_table, 2); },
                       {"block_table must be aligned to 4 bytes"}));
  t.push_back(contract(D, "block_table_int64", [](Case& c) { c.d.block_table.dtype = DType::kI64; },
                       {"block_table must be int32, got int64"}));
  t.push_back(contract(D, "block_table_missing", [](Case& c) { c.d.block_table = TensorView{}; }, {"block_table is required"}));
  t.push_back(contract(D, "offset_negative", [](Case& c) { c.d.offset = -1; },
                       {"offset must be in [0, out.shape[1] = 14], got -1"}));
  t.push_back(contract(D, "offset_past_out", [](Case& c) { c.d.offset = kDOutRows + 1; },
                       {"offset must be in [0, out.shape[1] = 14], got 15"}));
  t.push_back(contract(D, "block_size_0", [](Case& c) { c.d.block_size = 0; }, {"block_size must be >= 1, got 0"}));
  t.push_back(contract(D, "block_size_int64_max", [](Case& c) { c.d.block_size = kI64Max; },
                       {"block_size must fit in int32"}));
  t.push_back(contract(D, "block_stride_odd", [](Case& c) { c.d.k_cache.stride[0] = kDBlockStride + 1; },
                       {"k_cache block stride must be even"}));
  t.push_back(contract(D, "block_stride_below_block_data", [](Case& c) { c.d.k_cache.stride[0] = 1000; },
                       {"k_cache block stride must be >= block_size*584 = 2336 bytes, got 1000"}));
  t.push_back(contract(D, "k_cache_missing", [](Case& c) { c.d.k_cache = TensorView{}; }, {"k_cache is required"}));

  auto set = [](const char* which, int b, int32_t v) {
    return [=](Case& c) { at<int32_t>(std::string(which) == "seq" ? c.d.seq_lens : c.d.gather_lens, b) = v; };
  };
  auto empty_request = [](int b) {
    return [b](Case& c) { at<int32_t>(c.d.seq_lens, b) = 0, at<int32_t>(c.d.gather_lens, b) = 0; };
  };
  auto table = [](int b, int col, int32_t v) { return [=](Case& c) { at<int32_t>(c.d.block_table, b, col) = v; }; };
  t.push_back(skip(D, "seq_len_negative", set("seq", 0, -1), 1, empty_request(0)));
  t.push_back(skip(D, "seq_len_int32_min", set("seq", 1, kI32Min), 1, empty_request(1)));
  t.push_back(skip(D, "gather_len_above_seq_len", set("gather", 0, 8), 1, empty_request(0)));
  t.push_back(skip(D, "gather_len_negative", set("gather", 2, -1), 1, empty_request(2)));
  t.push_back(skip(D, "gather_len_int32_min", set("gather", 1, kI32Min), 1, empty_request(1)));
  t.push_back(skip(D, "gather_past_out_rows", [](Case& c) { c.d.offset = 10; }, 9));
  t.push_back(skip(D, "offset_at_end_all_rows_counted", [](Case& c) { c.d.offset = kDOutRows; }, 20));
  t.push_back(skip(D, "out_zero_rows_all_rows_counted", [](Case& c) { c.d.out.shape[1] = 0, c.d.offset = 0; }, 20));
  t.push_back(skip(D, "gather_len_int32_max_counted_in_bulk",
                   [](Case& c) { at<int32_t>(c.d.seq_lens, 2) = kI32Max, at<int32_t>(c.d.gather_lens, 2) = kI32Max; },
                   kI32Max - 12));
  t.push_back(skip(D, "seq_len_beyond_block_table", set("seq", 0, 14), 2));
  t.push_back(skip(D, "block_entry_minus1", table(1, 1, -1), 4));
  t.push_back(skip(D, "block_entry_int32_min", table(0, 0, kI32Min), 2));
  t.push_back(skip(D, "block_entry_num_blocks", table(2, 0, kDBlocks), 3));
  t.push_back(skip(D, "block_entry_int32_max", table(1, 2, kI32Max), 4));
  t.push_back(skip(D, "gather_lens_absent", [](Case& c) { c.d.gather_lens = TensorView{}; }, 0));
  t.push_back(skip(D, "gather_lens_extra_entries_not_read",
                   [](Case& c) {
                     c.d.gather_lens.shape[0] = 4;
                     c.fit();
                     at<int32_t>(c.d.gather_lens, 3) = kI32Min;
                   },
                   0));
  t.push_back(skip(D, "no_requests", [](Case& c) { c.d.seq_lens.shape[0] = 0; }, 0));
  t.push_back(skip(D, "empty_cache_every_row_counted", [](Case& c) { c.d.k_cache.shape[0] = 0; }, 20));
  t.push_back(skip(D, "fnuz_bad_entry", [](Case& c) { c.d.format = Fp8Format::kE4M3Fnuz, at<int32_t>(c.d.block_table, 0, 1) = -2; },
                   3));
  t.push_back(skip(D, "no_counter_bad_request",
                   [](Case& c) { c.count_errors = false, at<int32_t>(c.d.seq_lens, 1) = -5; }, 0,
                   [](Case& c) { c.count_errors = true, at<int32_t>(c.d.seq_lens, 1) = 0, at<int32_t>(c.d.gather_lens, 1) = 0; }));
}

void add_sparse_gather_rows(std::vector<Row>& t) {
  const Op S = op_index<SparseGatherArgs>;
  t.push_back(contract(S, "slot_indices_missing", [](Case& c) { c.sg.slot_indices = TensorView{}; },
                       {"slot_indices is required"}));
  t.push_back(contract(S, "slot_indices_uint8", [](Case& c) { c.sg.slot_indices.dtype = DType::kU8; },
                       {"slot_indices must be int32 or int64, got uint8"}));
  t.push_back(contract(S, "slot_indices_bf16", [](Case& c) { c.sg.slot_indices.dtype = DType::kBF16; },
                       {"slot_indices must be int32 or int64, got bfloat16"}));
  t.push_back(contract(S, "slot_indices_rank2", [](Case& c) { rank(c.sg.slot_indices, 2); },
                       {"slot_indices must have rank 1, got 2"}));
  t.push_back(contract(S, "slot_indices_stride2", [](Case& c) { c.sg.slot_indices.stride[0] = 2; },
                       {"slot_indices must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(S, "slot_indices_misaligned", [](Case& c) { misalign(c.sg.slot_indices, 2); },
                       {"slot_indices must be aligned to 4 bytes (its element size), got address 0x"}));
  t.push_back(contract(S, "out_missing", [](Case& c) { c.sg.out = TensorView{}; }, {"out is required"}));
  t.push_back(contract(S, "out_dtype", [](Case& c) { c.sg.out.dtype = DType::kU8; }, {"out must be bfloat16, got uint8"}));
  t.push_back(contract(S, "out_448_columns", [](Case& c) { c.sg.out.shape[1] = kNopeDim; },
                       {"out must have 512 columns, got 448"}));
  t.push_back(contract(S, "out_fewer_rows_than_slots", [](Case& c) { c.sg.out.shape[0] = 5; },
                       {"out must have at least 6 rows (one per slot), got 5"}));
  t.push_back(contract(S, "out_inner_stride", [](Case& c) { c.sg.out.stride[1] = 2; },
                       {"out must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(S, "out_misaligned", [](Case& c) { misalign(c.sg.out, 1); }, {"out must be aligned to 2 bytes"}));
  t.push_back(contract(S, "block_size_0", [](Case& c) { c.sg.block_size = 0; }, {"block_size must be >= 1, got 0"}));
  t.push_back(contract(S, "block_size_past_int32", [](Case& c) { c.sg.block_size = int64_t{1} << 31; },
                       {"block_size must fit in int32, got 2147483648"}));
  t.push_back(contract(S, "block_stride_odd", [](Case& c) { c.sg.k_cache.stride[0] = kDBlockStride + 1; },
                       {"k_cache block stride must be even"}));
  t.push_back(contract(S, "k_cache_missing", [](Case& c) { c.sg.k_cache = TensorView{}; }, {"k_cache is required"}));

  auto slot = [](int64_t i, int64_t v) {
    return [=](Case& c) {
      if (c.sg.slot_indices.dtype == DType::kI64) at<int64_t>(c.sg.slot_indices, i) = v;
      else at<int32_t>(c.sg.slot_indices, i) = static_cast<int32_t>(v);
    };
  };
  // Slots 0..4 hold 5, -1, 13, 0, 19, 7 (cache capacity 5 x 4 = 20); a skipped slot's row is the
  // row of a -1 (the sanitized input).
  t.push_back(skip(S, "slot_num_tokens", slot(0, kDBlocks * kDBlockSize), 1, slot(0, -1)));
  t.push_back(skip(S, "slot_minus2", slot(3, -2), 1, slot(3, -1)));
  t.push_back(skip(S, "slot_int32_min", slot(2, kI32Min), 1, slot(2, -1)));
  t.push_back(skip(S, "slot_int32_max", slot(4, kI32Max), 1, slot(4, -1)));
  t.push_back(skip(S, "all_padding", [](Case& c) { for (int64_t i = 0; i < 6; ++i) at<int32_t>(c.sg.slot_indices, i) = -1; }, 0));
  t.push_back(skip(S, "no_slots", [](Case& c) { c.sg.slot_indices.shape[0] = 0; }, 0));
  t.push_back(skip(S, "empty_cache_every_slot_counted", [](Case& c) { c.sg.k_cache.shape[0] = 0; }, 5));
  t.push_back(skip(S, "fnuz_bad_slot", [](Case& c) { c.sg.format = Fp8Format::kE4M3Fnuz, at<int32_t>(c.sg.slot_indices, 5) = -7; },
                   1));
  const int32_t base_slots[6] = {5, -1, 13, 0, 19, 7};
  auto widen = [=](int64_t i, int64_t v) {
    return [=](Case& c) {  // the same slots as int64, slot i replaced by v
      c.sg.slot_indices.dtype = DType::kI64;
      c.fit();
      for (int64_t j = 0; j < 6; ++j) at<int64_t>(c.sg.slot_indices, j) = j == i ? v : base_slots[j];
    };
  };
  t.push_back(skip(S, "int64_slot_past_int32", widen(2, (int64_t{1} << 40) + 3), 1, widen(2, -1)));
  t.push_back(skip(S, "int64_slot_int64_min", widen(0, kI64Min), 1, widen(0, -1)));
  t.push_back(skip(S, "no_counter_bad_slot", [](Case& c) { c.count_errors = false, at<int32_t>(c.sg.slot_indices, 0) = 99; }, 0,
                   [](Case& c) { c.count_errors = true, at<int32_t>(c.sg.slot_indices, 0) = -1; }));
}

void add_global_topk_rows(std::vector<Row>& t) {
  const Op G = op_index<GlobalTopkArgs>;
  t.push_back(contract(G, "topk_indices_int64", [](Case& c) { c.g.topk_indices.dtype = DType::kI64; },
                       {"topk_indices must be int32, got int64"}));
  t.push_back(contract(G, "topk_indices_rank1", [](Case& c) { rank(c.g.topk_indices, 1); },
                       {"topk_indices must have rank 2, got 1"}));
  t.push_back(contract(G, "topk_indices_inner_stride", [](Case& c) { c.g.topk_indices.stride[1] = 2; },
                       {"topk_indices must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(G, "topk_indices_misaligned", [](Case& c) { misalign(c.g.topk_indices, 1); },
                       {"topk_indices must be aligned to 4 bytes"}));
  t.push_back(contract(G, "token_to_req_short", [](Case& c) { c.g.token_to_req.shape[0] = 3; },
                       {"token_to_req_indices must have at least 4 entries (one per token), got 3"}));
  t.push_back(contract(G, "token_to_req_missing", [](Case& c) { c.g.token_to_req = TensorView{}; },
                       {"token_to_req_indices is required"}));
  t.push_back(contract(G, "block_table_uint8", [](Case& c) { c.g.block_table.dtype = DType::kU8; },
                       {"block_table must be int32, got uint8"}));
  t.push_back(contract(G, "block_table_rank1", [](Case& c) { rank(c.g.block_table, 1); },
                       {"block_table must have rank 2, got 1"}));
  t.push_back(contract(G, "block_table_inner_stride", [](Case& c) { c.g.block_table.stride[1] = 2; },
                       {"block_table must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(G, "is_valid_token_int32", [](Case& c) { c.g.is_valid_token.dtype = DType::kI32; },
                       {"is_valid_token must be bool, got int32"}));
  t.push_back(contract(G, "is_valid_token_short", [](Case& c) { c.g.is_valid_token.shape[0] = 2; },
                       {"is_valid_token must have at least 4 entries (one per token), got 2"}));
  t.push_back(contract(G, "output_too_wide", [](Case& c) { c.g.global_topk_indices.shape[1] = 7; },
                       {"global_topk_indices must have 6 columns (topk), got 7"}));
  t.push_back(contract(G, "output_too_few_rows", [](Case& c) { c.g.global_topk_indices.shape[0] = 3; },
                       {"global_topk_indices must have 4 rows, got 3"}));
  t.push_back(contract(G, "output_missing", [](Case& c) { c.g.global_topk_indices = TensorView{}; },
                       {"global_topk_indices is required"}));
  t.push_back(contract(G, "lens_too_long", [](Case& c) { c.g.topk_lens.shape[0] = 5; }, {"topk_lens must have 4 entries, got 5"}));
  t.push_back(contract(G, "lens_misaligned", [](Case& c) { misalign(c.g.topk_lens, 2); }, {"topk_lens must be aligned to 4 bytes"}));
  t.push_back(contract(G, "lens_int64", [](Case& c) { c.g.topk_lens.dtype = DType::kI64; }, {"topk_lens must be int32, got int64"}));
  t.push_back(contract(G, "block_size_0", [](Case& c) { c.g.block_size = 0; }, {"block_size must be >= 1, got 0"}));
  t.push_back(contract(G, "block_size_beyond_int32", [](Case& c) { c.g.block_size = int64_t{1} << 33; },
                       {"block_size must fit in int32, got 8589934592"}));

  auto req = [](int tok, int32_t v) { return [=](Case& c) { at<int32_t>(c.g.token_to_req, tok) = v; }; };
  auto dead = [](int64_t tok) { return [=](const Case& a, const Case&) { expect_dead_row(a, tok); }; };
  t.push_back(skip(G, "token_to_req_minus1", req(1, -1), 1, nullptr, dead(1)));
  t.push_back(skip(G, "token_to_req_num_reqs", req(1, 2), 1, nullptr, dead(1)));
  t.push_back(skip(G, "token_to_req_int32_min", req(3, kI32Min), 1, nullptr, dead(3)));
  t.push_back(skip(G, "token_to_req_int32_max", req(0, kI32Max), 1, nullptr, dead(0)));
  t.push_back(skip(G, "no_requests_every_token_counted", [](Case& c) { c.g.block_table.shape[0] = 0; }, 4));
  auto topk = [](int tok, int j, int32_t v) { return [=](Case& c) { at<int32_t>(c.g.topk_indices, tok, j) = v; }; };
  t.push_back(skip(G, "local_index_beyond_table_row", topk(0, 0, 12), 1, nullptr,
                   [](const Case& a, const Case& b) { expect_base_except(a, b, {{0, 0, -1}}, {{0, 4}}); }));
  t.push_back(skip(G, "local_index_int32_max", topk(1, 2, kI32Max), 1));
  t.push_back(skip(G, "negative_sentinels_not_counted",
                   [](Case& c) { at<int32_t>(c.g.topk_indices, 0, 1) = -2, at<int32_t>(c.g.topk_indices, 1, 0) = kI32Min; }, 0,
                   [](Case& c) { at<int32_t>(c.g.topk_indices, 0, 1) = -1, at<int32_t>(c.g.topk_indices, 1, 0) = -1; }));
  auto table = [](int b, int col, int32_t v) { return [=](Case& c) { at<int32_t>(c.g.block_table, b, col) = v; }; };
  t.push_back(skip(G, "block_entry_minus1", table(0, 1, -1), 3));
  t.push_back(skip(G, "block_entry_int32_min", table(1, 2, kI32Min), 3));
  t.push_back(skip(G, "global_index_overflows_int32", table(0, 2, 1 << 29), 2));
  t.push_back(skip(G, "global_index_int32_max_fits", table(0, 2, kI32Max / kGBlockSize), 0));
  t.push_back(skip(G, "all_tokens_invalid", [](Case& c) {
                     for (int i = 0; i < 4; ++i) at<uint8_t>(c.g.is_valid_token, i) = 0;
                   }, 0));
  t.push_back(skip(G, "bool_value_2_is_true", [](Case& c) { at<uint8_t>(c.g.is_valid_token, 0) = 2; }, 0,
                   [](Case& c) { at<uint8_t>(c.g.is_valid_token, 0) = 1; }));
  t.push_back(skip(G, "no_tokens",
                   [](Case& c) { c.g.topk_indices.shape[0] = 0, c.g.global_topk_indices.shape[0] = 0, c.g.topk_lens.shape[0] = 0; },
                   0));
  t.push_back(skip(G, "no_counter_bad_request", [](Case& c) { c.count_errors = false, at<int32_t>(c.g.token_to_req, 2) = -9; },
                   0, nullptr, dead(2)));
}

void add_combine_rows(std::vector<Row>& t) {
  const Op C = op_index<CombineArgs>;
  t.push_back(contract(C, "window_0", [](Case& c) { c.c.window_size = 0; }, {"window_size must be >= 1, got 0"}));
  t.push_back(contract(C, "window_negative", [](Case& c) { c.c.window_size = -128; }, {"window_size must be >= 1, got -128"}));
  t.push_back(contract(C, "window_int64_max", [](Case& c) { c.c.window_size = kI64Max; },
                       {"window_size must fit in int32"}));
  t.push_back(contract(C, "topk_beyond_int32", [](Case& c) { c.c.topk = int64_t{1} << 32; }, {"topk must fit in int32"}));
  t.push_back(contract(C, "compress_ratio_0", [](Case& c) { c.c.compress_ratio = 0; }, {"compress_ratio must be >= 1, got 0"}));
  t.push_back(contract(C, "topk_negative", [](Case& c) { c.c.topk = -1; }, {"topk must be >= 0, got -1"}));
  t.push_back(contract(C, "topk_wider_than_topk_indices", [](Case& c) { c.c.topk = 5; },
                       {"topk (5) must not exceed the width of topk_indices (4)"}));
  t.push_back(contract(C, "M_negative", [](Case& c) { c.c.M = -1; }, {"M must be >= 0, got -1"}));
  t.push_back(contract(C, "N_beyond_int32", [](Case& c) { c.c.N = int64_t{1} << 31; }, {"N must fit in int32, got 2147483648"}));
  t.push_back(contract(C, "M_beyond_int32", [](Case& c) { c.c.M = int64_t{1} << 40; }, {"M must fit in int32"}));
  t.push_back(contract(C, "max_image_tokens_negative", [](Case& c) { c.c.max_image_tokens = -1; },
                       {"max_image_tokens must be >= 0, got -1"}));
  t.push_back(contract(C, "query_start_loc_short", [](Case& c) { c.c.query_start_loc.shape[0] = 2; },
                       {"query_start_loc must have 3 entries (num_reqs + 1), got 2"}));
  t.push_back(contract(C, "query_start_loc_int64", [](Case& c) { c.c.query_start_loc.dtype = DType::kI64; },
                       {"query_start_loc must be int32, got int64"}));
  t.push_back(contract(C, "seq_lens_missing", [](Case& c) { c.c.seq_lens = TensorView{}; }, {"seq_lens is required"}));
  t.push_back(contract(C, "gather_lens_missing", [](Case& c) { c.c.gather_lens = TensorView{}; }, {"gather_lens is required"}));
  t.push_back(contract(C, "gather_lens_short", [](Case& c) { c.c.gather_lens.shape[0] = 1; },
                       {"gather_lens must have at least 2 entries (one per request), got 1"}));
  t.push_back(contract(C, "only_left_visible", [](Case& c) { c.c.right_visible = TensorView{}; },
                       {"left_visible and right_visible must be given together"}));
  t.push_back(contract(C, "only_right_visible", [](Case& c) { c.c.left_visible = TensorView{}; },
                       {"left_visible and right_visible must be given together"}));
  t.push_back(contract(C, "left_visible_short", [](Case& c) { c.c.left_visible.shape[0] = 4; },
                       {"left_visible must have at least 5 entries (one per token), got 4"}));
  t.push_back(contract(C, "right_visible_int64", [](Case& c) { c.c.right_visible.dtype = DType::kI64; },
                       {"right_visible must be int32, got int64"}));
  t.push_back(contract(C, "output_width_127", [](Case& c) { c.c.combined_indices.shape[1] = 127; },
                       {"combined_indices must have round_up(topk + window_size + max_image_tokens, 128) = 128 columns, got 127"}));
  t.push_back(contract(C, "output_width_counts_image_tokens", [](Case& c) { c.c.max_image_tokens = 200; },
                       {"combined_indices must have round_up(topk + window_size + max_image_tokens, 128) = 256 columns, got 128"}));
  t.push_back(contract(C, "output_rows", [](Case& c) { c.c.combined_indices.shape[0] = 4; },
                       {"combined_indices must have 5 rows, got 4"}));
  t.push_back(contract(C, "lens_short", [](Case& c) { c.c.combined_lens.shape[0] = 4; }, {"combined_lens must have 5 entries, got 4"}));
  t.push_back(contract(C, "topk_indices_inner_stride", [](Case& c) { c.c.topk_indices.stride[1] = 3; },
                       {"topk_indices must have unit stride in its last dimension, got 3"}));
  t.push_back(contract(C, "output_misaligned", [](Case& c) { misalign(c.c.combined_indices, 2); },
                       {"combined_indices must be aligned to 4 bytes"}));
  t.push_back(contract(C, "topk_indices_missing", [](Case& c) { c.c.topk_indices = TensorView{}; },
                       {"topk_indices is required"}));

  auto topk = [](int tok, int j, int32_t v) { return [=](Case& c) { at<int32_t>(c.c.topk_indices, tok, j) = v; }; };
  auto i32 = [](TensorView CombineArgs::*f, int i, int32_t v) { return [=](Case& c) { at<int32_t>(c.c.*f, i) = v; }; };
  auto dead = [](std::vector<int64_t> rows) {
    return [=](const Case& a, const Case&) {
      for (int64_t r : rows) expect_dead_row(a, r);
    };
  };
  // Entries >= N pass through as v + M*b (vLLM's bytes; combine follows no index): not counted.
  t.push_back(skip(C, "topk_entry_at_N_passes_through", topk(0, 0, 20), 0, nullptr,
                   [](const Case& a, const Case& b) { expect_base_except(a, b, {{0, 0, 20}}); }));
  t.push_back(skip(C, "topk_entry_beyond_N_passes_through", topk(3, 1, 4095), 0, nullptr,
                   [](const Case& a, const Case& b) { expect_base_except(a, b, {{3, 1, 4195}}); }));
  t.push_back(skip(C, "topk_entry_int32_max", topk(4, 1, kI32Max), 1, nullptr,
                   [](const Case& a, const Case& b) { expect_base_except(a, b, {{4, 1, -1}}); }));
  t.push_back(skip(C, "topk_negative_sentinels_not_counted",
                   [](Case& c) { at<int32_t>(c.c.topk_indices, 2, 1) = -2, at<int32_t>(c.c.topk_indices, 3, 2) = kI32Min; }, 0,
                   nullptr, [](const Case& a, const Case& b) { expect_base_except(a, b, {{2, 1, -1}, {3, 2, -1}}); }));
  t.push_back(skip(C, "topk_beyond_topk_len_not_read", topk(0, 2, kI32Min), 0, nullptr,
                   [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
  t.push_back(skip(C, "topk_column_beyond_topk_not_read", topk(3, 3, kI32Max), 0, nullptr,
                   [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
  t.push_back(skip(C, "left_visible_negative", i32(&CombineArgs::left_visible, 3, -5), 1,
                   i32(&CombineArgs::left_visible, 3, 0)));
  t.push_back(skip(C, "right_visible_int32_min", i32(&CombineArgs::right_visible, 0, kI32Min), 1,
                   i32(&CombineArgs::right_visible, 0, 0)));
  t.push_back(skip(C, "both_visibilities_negative",
                   [](Case& c) { at<int32_t>(c.c.left_visible, 4) = -1, at<int32_t>(c.c.right_visible, 4) = -1; }, 2,
                   [](Case& c) { at<int32_t>(c.c.left_visible, 4) = 0, at<int32_t>(c.c.right_visible, 4) = 0; }));
  // With max_image_tokens == 0 the visibility arrays are not read (vLLM's IMAGE_WIDTH gate): a negative
  // value is neither counted nor used, and the rows equal those of the same call without the arrays.
  t.push_back(skip(C, "visibility_not_read_without_image_columns",
                   [](Case& c) {
                     c.c.max_image_tokens = 0;
                     at<int32_t>(c.c.left_visible, 3) = -5, at<int32_t>(c.c.right_visible, 1) = kI32Min;
                   },
                   0, [](Case& c) { c.c.left_visible = TensorView{}, c.c.right_visible = TensorView{}; }));
  t.push_back(skip(C, "seq_len_shorter_than_query", i32(&CombineArgs::seq_lens, 1, 2), 1, nullptr, dead({2, 3, 4})));
  t.push_back(skip(C, "seq_len_negative", i32(&CombineArgs::seq_lens, 0, -1), 1, nullptr, dead({0, 1})));
  t.push_back(skip(C, "gather_len_above_seq_len", i32(&CombineArgs::gather_lens, 0, 7), 1, nullptr, dead({0, 1})));
  t.push_back(skip(C, "gather_len_negative", i32(&CombineArgs::gather_lens, 1, -1), 1, nullptr, dead({2, 3, 4})));
  // query_start_loc {10, 13, 12}: request 1's range is reversed (malformed, counted once); tokens 0-2
  // belong to request 0, tokens 3 and 4 to no request.
  t.push_back(skip(C, "query_start_loc_not_monotonic",
                   [](Case& c) { at<int32_t>(c.c.query_start_loc, 1) = 13, at<int32_t>(c.c.query_start_loc, 2) = 12; }, 1,
                   nullptr, dead({3, 4})));
  t.push_back(skip(C, "query_start_loc_first_above_second", i32(&CombineArgs::query_start_loc, 1, 9), 1));
  t.push_back(skip(C, "tokens_outside_every_request", i32(&CombineArgs::query_start_loc, 2, 13), 0, nullptr,
                   dead({3, 4})));
  t.push_back(skip(C, "query_start_loc_int32_min_base",
                   [](Case& c) {
                     at<int32_t>(c.c.query_start_loc, 0) = kI32Min;
                     at<int32_t>(c.c.query_start_loc, 1) = kI32Min + 2;
                     at<int32_t>(c.c.query_start_loc, 2) = kI32Min + 5;
                   },
                   0, nullptr, [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
  // Request 1's entries M*1 + v overflow int32 for v >= 1 (v = 0 gives exactly INT32_MAX):
  // top-k columns 3, 15 | 19, 4 | 8, 11 and all 12 SWA columns.
  t.push_back(skip(C, "M_times_request_overflows", [](Case& c) { c.c.M = kI32Max; }, 18, nullptr,
                   [](const Case& a, const Case& b) {
                     for (int64_t tok = 2; tok < 5; ++tok)
                       for (int64_t j = 0; j < a.c.combined_indices.shape[1]; ++j) {
                         const int32_t base = at<int32_t>(b.c.combined_indices, tok, j);
                         const int32_t want = base < 0 ? -1 : base == 100 ? kI32Max : -1;
                         EXPECT_EQ(at<int32_t>(a.c.combined_indices, tok, j), want) << "row " << tok << " column " << j;
                       }
                   }));
  t.push_back(skip(C, "no_requests", [](Case& c) { c.c.seq_lens.shape[0] = 0, c.c.query_start_loc.shape[0] = 1; }, 0, nullptr,
                   dead({0, 1, 2, 3, 4})));
  t.push_back(skip(C, "no_counter_malformed_request",
                   [](Case& c) { c.count_errors = false, at<int32_t>(c.c.gather_lens, 1) = 10; }, 0, nullptr, dead({2, 3, 4})));
}

void add_mixed_rows(std::vector<Row>& t) {
  const Op X = op_index<MixedSparseArgs>;
  t.push_back(contract(X, "window_0", [](Case& c) { c.x.window_size = 0; }, {"window_size must be >= 1, got 0"}));
  t.push_back(contract(X, "compress_ratio_0", [](Case& c) { c.x.compress_ratio = 0; }, {"compress_ratio must be >= 1, got 0"}));
  t.push_back(contract(X, "topk_negative", [](Case& c) { c.x.topk = -1; }, {"topk must be >= 0, got -1"}));
  t.push_back(contract(X, "max_image_tokens_negative", [](Case& c) { c.x.max_image_tokens = -2; },
                       {"max_image_tokens must be >= 0, got -2"}));
  t.push_back(contract(X, "swa_block_size_0", [](Case& c) { c.x.swa_block_size = 0; }, {"swa_block_size must be >= 1, got 0"}));
  t.push_back(contract(X, "compressed_block_size_negative", [](Case& c) { c.x.compressed_block_size = -1; },
                       {"compressed_block_size must be >= 1, got -1"}));
  t.push_back(contract(X, "swa_block_span_0", [](Case& c) { c.x.swa_block_span = 0; }, {"swa_block_span must be >= 1, got 0"}));
  t.push_back(contract(X, "compressed_block_span_negative", [](Case& c) { c.x.compressed_block_span = -1; },
                       {"compressed_block_span must be >= 1, got -1"}));
  t.push_back(contract(X, "swa_block_span_beyond_int32", [](Case& c) { c.x.swa_block_span = int64_t{1} << 40; },
                       {"swa_block_span must fit in int32"}));
  t.push_back(contract(X, "max_image_tokens_int64_max", [](Case& c) { c.x.max_image_tokens = kI64Max; },
                       {"max_image_tokens must fit in int32"}));
  t.push_back(contract(X, "decode_swa_narrower_than_window", [](Case& c) { c.x.window_size = 6; },
                       {"decode_swa_indices must have at least window_size = 6 columns, got 5"}));
  t.push_back(contract(X, "decode_compressed_rows", [](Case& c) { c.x.decode_compressed_indices.shape[0] = 1; },
                       {"decode_compressed_indices must have 2 rows (one per decode token), got 1"}));
  t.push_back(contract(X, "decode_lens_short", [](Case& c) { c.x.decode_compressed_topk_lens.shape[0] = 1; },
                       {"decode_compressed_topk_lens must have at least 2 entries (one per decode token), got 1"}));
  t.push_back(contract(X, "query_start_loc_short", [](Case& c) { c.x.query_start_loc.shape[0] = 3; },
                       {"query_start_loc must have 4 entries (num_reqs + 1), got 3"}));
  t.push_back(contract(X, "token_to_req_short", [](Case& c) { c.x.token_to_req.shape[0] = 4; },
                       {"token_to_req_indices must have at least 5 entries (decode + prefill tokens), got 4"}));
  t.push_back(contract(X, "decode_is_valid_token_missing", [](Case& c) { c.x.decode_is_valid_token = TensorView{}; },
                       {"decode_is_valid_token is required when decode_compressed_indices_are_local is true"}));
  t.push_back(contract(X, "decode_is_valid_token_int32", [](Case& c) { c.x.decode_is_valid_token.dtype = DType::kI32; },
                       {"decode_is_valid_token must be bool, got int32"}));
  t.push_back(contract(X, "only_prefill_left_visible", [](Case& c) { c.x.prefill_right_visible = TensorView{}; },
                       {"prefill_left_visible and prefill_right_visible must be given together"}));
  t.push_back(contract(X, "prefill_right_visible_short", [](Case& c) { c.x.prefill_right_visible.shape[0] = 4; },
                       {"prefill_right_visible must have at least 5 entries (decode + prefill tokens), got 4"}));
  t.push_back(contract(X, "output_width", [](Case& c) { c.x.sparse_indices.shape[1] = kXWidth + 1; },
                       {"sparse_indices must have swa_width + image_width + round_up(max(topk, decode_topk), 4) = 15 "
                        "columns, got 16"}));
  t.push_back(contract(X, "output_width_without_visibility",
                       [](Case& c) { c.x.prefill_left_visible = TensorView{}, c.x.prefill_right_visible = TensorView{}; },
                       {"= 13 columns, got 15"}));
  t.push_back(contract(X, "output_rows", [](Case& c) { c.x.sparse_indices.shape[0] = 4; },
                       {"sparse_indices must have 5 rows (decode + prefill tokens), got 4"}));
  t.push_back(contract(X, "lens_long", [](Case& c) { c.x.sparse_topk_lens.shape[0] = 6; },
                       {"sparse_topk_lens must have 5 entries, got 6"}));
  t.push_back(contract(X, "swa_block_table_int64", [](Case& c) { c.x.swa_block_table.dtype = DType::kI64; },
                       {"swa_block_table must be int32, got int64"}));
  t.push_back(contract(X, "compressed_block_table_rank1", [](Case& c) { rank(c.x.compressed_block_table, 1); },
                       {"compressed_block_table must have rank 2, got 1"}));
  t.push_back(contract(X, "prefill_topk_inner_stride", [](Case& c) { c.x.prefill_topk_indices.stride[1] = 2; },
                       {"prefill_topk_indices must have unit stride in its last dimension, got 2"}));
  t.push_back(contract(X, "prefill_topk_missing", [](Case& c) { c.x.prefill_topk_indices = TensorView{}; },
                       {"prefill_topk_indices is required"}));
  t.push_back(contract(X, "output_misaligned", [](Case& c) { misalign(c.x.sparse_indices, 1); },
                       {"sparse_indices must be aligned to 4 bytes"}));

  auto i32 = [](TensorView MixedSparseArgs::*f, int i, int32_t v) { return [=](Case& c) { at<int32_t>(c.x.*f, i) = v; }; };
  auto i32_2 = [](TensorView MixedSparseArgs::*f, int i, int j, int32_t v) {
    return [=](Case& c) { at<int32_t>(c.x.*f, i, j) = v; };
  };
  auto dead = [](std::vector<int64_t> rows) {
    return [=](const Case& a, const Case&) {
      for (int64_t r : rows) expect_dead_row(a, r);
    };
  };
  auto others_base = [](std::vector<int64_t> rows) {
    return [=](const Case& a, const Case& b) {
      for (int64_t r = 0; r < 5; ++r)
        if (std::find(rows.begin(), rows.end(), r) == rows.end()) expect_base_row(a, b, r);
    };
  };
  // Decode row 0's compressed columns start at swa_width + image_width = 7.
  t.push_back(skip(X, "decode_token_to_req_num_reqs", i32(&MixedSparseArgs::token_to_req, 0, 7), 2, nullptr,
                   [](const Case& a, const Case& b) { expect_base_except(a, b, {{0, 7, -1}, {0, 9, -1}}, {{0, 7}}); }));
  t.push_back(skip(X, "decode_token_to_req_minus1", i32(&MixedSparseArgs::token_to_req, 0, -1), 2, nullptr,
                   [](const Case& a, const Case& b) { expect_base_except(a, b, {{0, 7, -1}, {0, 9, -1}}, {{0, 7}}); }));
  t.push_back(skip(X, "decode_local_index_beyond_table", i32_2(&MixedSparseArgs::decode_compressed_indices, 1, 0, 6), 1,
                   nullptr, [](const Case& a, const Case& b) {
                     expect_base_except(a, b, {{1, 7, -1}}, {{1, at<int32_t>(b.x.sparse_topk_lens, 1) - 1}});
                   }));
  t.push_back(skip(X, "decode_table_entry_negative", i32_2(&MixedSparseArgs::compressed_block_table, 0, 0, -1), 1, nullptr,
                   [](const Case& a, const Case& b) {
                     expect_base_except(a, b, {{0, 7, -1}}, {{0, at<int32_t>(b.x.sparse_topk_lens, 0) - 1}});
                   }));
  t.push_back(skip(X, "decode_swa_negative_sentinels_not_counted",
                   [](Case& c) { at<int32_t>(c.x.decode_swa_indices, 0, 0) = -2, at<int32_t>(c.x.decode_swa_indices, 1, 4) = kI32Min; },
                   0, nullptr, [](const Case& a, const Case& b) { expect_base_except(a, b, {{0, 0, -1}, {1, 4, -1}}); }));
  t.push_back(skip(X, "decode_invalid_token", [](Case& c) { at<uint8_t>(c.x.decode_is_valid_token, 0) = 0; }, 0, nullptr,
                   [](const Case& a, const Case& b) { expect_base_except(a, b, {}, {{0, 7}}); }));
  t.push_back(skip(X, "decode_visibility_not_read",
                   [](Case& c) { at<int32_t>(c.x.prefill_left_visible, 0) = -1, at<int32_t>(c.x.prefill_right_visible, 1) = kI32Min; },
                   0, nullptr, [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
  t.push_back(skip(X, "prefill_token_to_req_num_reqs", i32(&MixedSparseArgs::token_to_req, 3, 3), 1, nullptr, dead({3})));
  t.push_back(skip(X, "prefill_token_to_req_wrong_request", i32(&MixedSparseArgs::token_to_req, 3, 0), 1, nullptr,
                   [](const Case& a, const Case& b) {
                     expect_dead_row(a, 3);
                     for (int64_t r : {0, 1, 2, 4}) expect_base_row(a, b, r);
                   }));
  t.push_back(skip(X, "prefill_token_to_req_int32_min", i32(&MixedSparseArgs::token_to_req, 4, kI32Min), 1, nullptr, dead({4})));
  t.push_back(skip(X, "prefill_seq_len_shorter_than_query", i32(&MixedSparseArgs::seq_lens, 2, 2), 3, nullptr,
                   dead({2, 3, 4})));
  t.push_back(skip(X, "prefill_seq_len_negative", i32(&MixedSparseArgs::seq_lens, 2, -1), 3, nullptr, dead({2, 3, 4})));
  t.push_back(skip(X, "prefill_token_outside_query_range", i32(&MixedSparseArgs::query_start_loc, 3, 4), 1, nullptr,
                   dead({4})));
  t.push_back(skip(X, "query_start_loc_not_monotonic", i32(&MixedSparseArgs::query_start_loc, 2, 6), 3, nullptr,
                   [](const Case& a, const Case& b) {
                     for (int64_t r : {2, 3, 4}) expect_dead_row(a, r);
                     for (int64_t r : {0, 1}) expect_base_row(a, b, r);
                   }));
  t.push_back(skip(X, "prefill_left_visible_negative", i32(&MixedSparseArgs::prefill_left_visible, 2, -1), 1,
                   i32(&MixedSparseArgs::prefill_left_visible, 2, 0)));
  t.push_back(skip(X, "prefill_right_visible_int32_min", i32(&MixedSparseArgs::prefill_right_visible, 4, kI32Min), 1,
                   i32(&MixedSparseArgs::prefill_right_visible, 4, 0)));
  t.push_back(skip(X, "prefill_local_index_beyond_table", i32_2(&MixedSparseArgs::prefill_topk_indices, 0, 0, 6), 1,
                   nullptr, others_base({2})));
  t.push_back(skip(X, "prefill_topk_beyond_topk_len_not_read", i32_2(&MixedSparseArgs::prefill_topk_indices, 0, 5, kI32Max),
                   0, nullptr, [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
  // Positions 4..7 of request 2 lie in its SWA block-table column 1: 4 + 4 + 2 window lookups.
  t.push_back(skip(X, "prefill_swa_table_entry_negative", i32_2(&MixedSparseArgs::swa_block_table, 2, 1, -1), 10, nullptr,
                   others_base({2, 3, 4})));
  // Span 2^30: a remapped index (v / 4) * 2^30 + v % 4 overflows int32 once v / 4 >= 2: decode SWA
  // values 13, 22, 30, 9 and every prefill SWA entry (request 2's SWA blocks are all >= 2).
  t.push_back(skip(X, "swa_block_span_overflows_int32", [](Case& c) { c.x.swa_block_span = int64_t{1} << 30; }, 19));
  t.push_back(skip(X, "no_counter_bad_prefill_request",
                   [](Case& c) { c.count_errors = false, at<int32_t>(c.x.token_to_req, 2) = 9; }, 0, nullptr, dead({2})));
}


/// Hostile sizes, strides and pointers (spec "Argument contracts", "Integer ranges and extents"):
/// every size, width, extent and offset validate() forms is overflow-checked, and an overflow is a
/// contract error naming the argument, never a wrapped value. Each row reproduces a finding that
/// wrote out of bounds, through NULL or printed a wrapped number before the checks existed.
void add_overflow_rows(std::vector<Row>& t) {
  constexpr int64_t k2p32 = int64_t{1} << 32, k2p62 = int64_t{1} << 62;
  const Op Q = op_index<QuantizeInsertArgs>, D = op_index<DequantizeGatherArgs>, G = op_index<GlobalTopkArgs>,
           C = op_index<CombineArgs>, X = op_index<MixedSparseArgs>;
  auto mat = [](TensorView& v, void* data, int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
    v.data = data, v.ndim = 2, v.shape = {rows, cols, 0}, v.stride = {s0, s1, 0};
  };

  // error_count: 4-byte aligned on every operation (a misaligned atomicAdd on the device).
  for (Op op = 0; op < kNumOps; ++op)
    t.push_back(contract(op, "error_count_misaligned", [](Case& c) { c.count_offset = 2; },
                         {"error_count must be aligned to 4 bytes (int32), got address 0x"}));

  // The element count 2^64 wrapped to 0, skipping the null-pointer check; quantize then wrote
  // through NULL.
  t.push_back(contract(Q, "k_cache_numel_overflows_null_data",
                       [=](Case& c) { mat(c.q.k_cache, nullptr, k2p32, k2p32, k2p32, 1); },
                       {"k_cache has more elements than int64 can count (the product of its sizes overflows int64)"}));
  t.push_back(contract(Q, "k_cache_rank3_numel_overflows", [](Case& c) {
                         TensorView& v = c.q.k_cache;
                         v.ndim = 3, v.shape = {int64_t{1} << 21, int64_t{1} << 21, int64_t{1} << 22};
                         v.stride = {int64_t{1} << 43, int64_t{1} << 22, 1};
                       },
                       {"k_cache has more elements than int64 can count"}));
  // Block 2 at 2 * 2^62 bytes: the offset itself overflows.
  t.push_back(contract(Q, "k_cache_extent_overflows", [](Case& c) { c.q.k_cache.stride[0] = int64_t{1} << 62; },
                       {"k_cache spans more bytes than int64 can count (its byte extent (1 + sum of (size - 1) * "
                        "stride) * 1 overflows int64)"}));
  // The extent (one stride plus one block) fits, but num_blocks * block_stride does not.
  t.push_back(contract(Q, "k_cache_num_blocks_times_stride_overflows",
                       [](Case& c) {
                         c.q.k_cache.shape[0] = 2;
                         c.q.k_cache.stride[0] = 3 * (int64_t{1} << 61);
                       },
                       {"k_cache num_blocks * block_stride (2 * 6917529027641081856) overflows int64"}));
  // No block, so the view is empty; its per-block byte count wrapped to 0 and was printed.
  t.push_back(contract(Q, "k_cache_bytes_per_block_overflow", [](Case& c) {
                         TensorView& v = c.q.k_cache;
                         v.ndim = 3, v.shape = {0, int64_t{1} << 32, int64_t{1} << 32}, v.stride = {0, int64_t{1} << 32, 1};
                       },
                       {"k_cache bytes per block (the product of its sizes after the first) overflows int64"}));
  t.push_back(contract(Q, "k_extends_past_address_space",
                       [](Case& c) { c.q.k.data = reinterpret_cast<void*>(~uintptr_t{0} - 1023); },
                       {"k extends past the end of the address space"}));

  // A zero-stride (aliased) output of 2^71 elements: its element count overflowed.
  t.push_back(contract(D, "out_zero_stride_numel_overflows", [](Case& c) {
                         TensorView& v = c.d.out;
                         v.shape = {4, int64_t{1} << 60, kHeadDim}, v.stride = {0, 0, 1};
                       },
                       {"out has more elements than int64 can count"}));
  t.push_back(contract(D, "block_table_extent_overflows", [=](Case& c) { c.d.block_table.stride[0] = k2p62; },
                       {"block_table spans more bytes than int64 can count"}));
  t.push_back(contract(G, "block_table_numel_overflows",
                       [=](Case& c) { mat(c.g.block_table, c.g.block_table.data, int64_t{1} << 33, int64_t{1} << 31, 0, 1); },
                       {"block_table has more elements than int64 can count"}));

  // R + 1 overflowed, and the message read "must have -9223372036854775808 entries".
  t.push_back(contract(C, "seq_lens_int64_max_entries", [](Case& c) { c.c.seq_lens.shape[0] = kI64Max; },
                       {"seq_lens spans more bytes than int64 can count"}));
  // Row lengths are int32: a row wider than INT32_MAX could not report its length.
  t.push_back(contract(C, "row_width_beyond_int32",
                       [](Case& c) {
                         c.c.topk = kI32Max;
                         c.c.topk_indices.shape[1] = kI32Max;
                       },
                       {"combined_indices row width round_up(topk + window_size + max_image_tokens, 128) = "
                        "2147483776 must fit in int32 (row lengths are int32)"}));

  // The heap overflow: empty decode tensors of width ~2^63 made the row width wrap to 13, the
  // 13-column output passed, and the prefill rows wrote 2^63 columns past it.
  t.push_back(contract(X, "row_width_wraps_int64",
                       [](Case& c) {
                         MixedSparseArgs& x = c.x;
                         x.decode_swa_indices.shape = {0, kI64Max, 0};
                         x.decode_compressed_indices.shape = {0, kI64Max - 3, 0};
                         x.max_image_tokens = 18;  // kI64Max + 18 + (kI64Max - 3) = 13 mod 2^64
                         x.sparse_indices.shape = {3, 13, 0};
                         x.sparse_topk_lens.shape[0] = 3;
                       },
                       {"sparse_indices row width swa_width + image_width + round_up(max(topk, decode_topk), 4) "
                        "(swa_width = 9223372036854775807, decode_topk = 9223372036854775804) overflows int64"}));
  t.push_back(contract(X, "row_width_beyond_int32",
                       [](Case& c) {
                         c.x.decode_swa_indices.shape = {0, int64_t{1} << 31, 0};
                         c.x.decode_compressed_indices.shape[0] = 0;
                       },
                       {"sparse_indices row width swa_width + image_width + round_up(max(topk, decode_topk), 4) = "
                        "2147483658 must fit in int32 (row lengths are int32)"}));
  // D + P = 2^63: a zero-stride decode tensor of 2^62 rows and an empty prefill tensor of 2^62.
  t.push_back(contract(X, "token_count_overflows",
                       [=](Case& c) {
                         MixedSparseArgs& x = c.x;
                         x.window_size = 1;
                         mat(x.decode_swa_indices, x.decode_swa_indices.data, k2p62, 1, 0, 1);
                         x.decode_compressed_indices = TensorView{};
                         x.decode_compressed_topk_lens = TensorView{};
                         mat(x.prefill_topk_indices, x.prefill_topk_indices.data, k2p62, 0, 0, 1);
                       },
                       {"decode + prefill tokens (rows of decode_swa_indices + rows of prefill_topk_indices) "
                        "overflows int64"}));

  // Empty views bound none of their strides (their extent is 0): a backend must never offset a
  // pointer by them (the reference's per-request slice of an empty `out` did; fuzz_validate).
  t.push_back(skip(D, "out_no_rows_huge_stride",
                   [](Case& c) {
                     c.d.out.shape[1] = 0, c.d.out.stride[0] = kI64Max - 1, c.d.out.stride[1] = kI64Max / 2;
                     c.d.offset = 0;
                   },
                   5 + 12 + 3));  // every gathered row lies past out.shape[1] = 0
  t.push_back(skip(G, "zero_width_huge_strides",
                   [](Case& c) {
                     c.g.topk_indices.shape[1] = 0, c.g.topk_indices.stride[0] = kI64Max;
                     c.g.global_topk_indices.shape[1] = 0, c.g.global_topk_indices.stride[0] = kI64Max - 7;
                   },
                   0, nullptr, [](const Case& a, const Case&) {
                     for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(at<int32_t>(a.g.topk_lens, r), 0) << "row " << r;
                   }));
  t.push_back(skip(X, "prefill_topk_zero_width_huge_stride",
                   [](Case& c) { c.x.prefill_topk_indices.shape[1] = 0, c.x.prefill_topk_indices.stride[0] = kI64Max; }, 0,
                   nullptr, [](const Case& a, const Case& b) {
                     for (int64_t r = 0; r < 2; ++r) expect_base_row(a, b, r);
                     for (int64_t r = 2; r < 5; ++r)
                       for (int64_t j = 7; j < kXWidth; ++j) EXPECT_EQ(at<int32_t>(a.x.sparse_indices, r, j), -1);
                   }));

  // decode_compressed_topk_lens near INT32_MAX: swa_total (7) + len passed INT32_MAX and the
  // length wrapped negative. It is clamped to INT32_MAX and counted; rows 1..4 are unaffected.
  auto caller_lens = [](int32_t len0, int32_t len1) {
    return [=](Case& c) {
      c.x.decode_compressed_indices_are_local = false;
      at<int32_t>(c.x.decode_compressed_topk_lens, 0) = len0;
      at<int32_t>(c.x.decode_compressed_topk_lens, 1) = len1;
    };
  };
  auto lens_are = [](int32_t len0, int32_t len1) {
    return [=](const Case& a, const Case& b) {
      EXPECT_EQ(at<int32_t>(a.x.sparse_topk_lens, 0), len0);
      EXPECT_EQ(at<int32_t>(a.x.sparse_topk_lens, 1), len1);
      for (int64_t r = 2; r < 5; ++r) expect_base_row(a, b, r);
    };
  };
  t.push_back(skip(X, "decode_lens_int32_max_clamped", caller_lens(kI32Max, 3), 1, nullptr, lens_are(kI32Max, 10)));
  t.push_back(skip(X, "decode_lens_just_past_int32_clamped", caller_lens(kI32Max - 6, kI32Max - 6), 2, nullptr,
                   lens_are(kI32Max, kI32Max)));
  t.push_back(skip(X, "decode_lens_reaching_int32_max_exact", caller_lens(kI32Max - 7, 0), 0, nullptr,
                   lens_are(kI32Max, 7)));
  t.push_back(skip(X, "decode_lens_int32_min_no_wrap", caller_lens(2, kI32Min), 0, nullptr, lens_are(9, kI32Min + 7)));
}

const std::vector<Row>& rows() {
  static const std::vector<Row> table = [] {
    std::vector<Row> t;
    add_quantize_rows(t);
    add_dequantize_rows(t);
    add_sparse_gather_rows(t);
    add_global_topk_rows(t);
    add_combine_rows(t);
    add_mixed_rows(t);
    add_overflow_rows(t);
    return t;
  }();
  return table;
}

// ---------------------------------------------------------------------------
// Running one row
// ---------------------------------------------------------------------------

/// Builds, mutates and runs row `r` on `be`; checks everything the table states. Returns the case.
CasePtr run_row(const Row& r, Backend& be) {
  CasePtr c = build(r.op);
  r.mutate(*c);
  c->fit();
  const auto before = snapshot(*c);
  const std::string op = op_name(r.op);

  if (!r.error.empty()) {
    try {
      run(be, *c);
      ADD_FAILURE() << be.name() << ": expected a contract error containing \"" << r.error[0] << "\", but the call returned";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(op + ": ", 0), 0u) << "message does not start with the operation: " << msg;
      for (const auto& f : r.error) EXPECT_NE(msg.find(f), std::string::npos) << "message lacks \"" << f << "\": " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << be.name() << ": expected dsv4kv::Error, got another exception: " << e.what();
    }
    EXPECT_TRUE(untouched_outside(*c, before, nullptr)) << "a rejected call must not write anything";
    return c;
  }

  try {
    run(be, *c);
  } catch (const std::exception& e) {
    ADD_FAILURE() << be.name() << ": unexpected exception: " << e.what();
    return c;
  }
  if (c->count_errors) {
    EXPECT_EQ(c->counted(), r.count) << "error_count";
  } else {
    EXPECT_EQ(c->counted(), 0) << "error_count = nullptr, yet the counter buffer changed";
  }
  const Allowed allowed = allowed_region(*c);
  EXPECT_TRUE(untouched_outside(*c, before, &allowed));

  int64_t model_count = -1;
  if (r.op == op_index<QuantizeInsertArgs>) model_count = check_quantize_values(*c);
  if (r.op == op_index<DequantizeGatherArgs>) model_count = check_dequantize_values(*c);
  if (r.op == op_index<GlobalTopkArgs>) model_count = check_global_topk_values(*c);
  if (r.op == op_index<SparseGatherArgs>) model_count = check_sparse_gather_values(*c);
  if (model_count >= 0 && c->count_errors) {
    EXPECT_EQ(model_count, r.count) << "the table's count disagrees with the spec model";
  }

  if (r.sanitize) {
    CasePtr s = build(r.op);
    r.mutate(*s);
    r.sanitize(*s);
    s->fit();
    auto ref = make_reference_backend();
    run(*ref, *s);
    EXPECT_EQ(s->counted(), 0) << "the sanitized input should be clean";
    for (size_t i = 0; i < c->slots.size(); ++i)
      if (c->slots[i].output) {
        EXPECT_EQ(c->slots[i].buf->bytes, s->slots[i].buf->bytes)
            << c->slots[i].name << " differs from the result of the equivalent valid input";
      }
  }
  if (r.check) {
    CasePtr base = build(r.op);
    auto ref = make_reference_backend();
    run(*ref, *base);
    r.check(*c, *base);
  }
  return c;
}

std::string row_test_name(const ::testing::TestParamInfo<size_t>& info) {
  const Row& r = rows()[info.param];
  std::string n = std::string(op_short(r.op)) + "_" + r.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

class BadInputsReference : public ::testing::TestWithParam<size_t> {};

TEST_P(BadInputsReference, Row) {
  auto be = make_reference_backend();
  run_row(rows()[GetParam()], *be);
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputsReference, ::testing::Range<size_t>(0, rows().size()), row_test_name);

class BadInputsCuda : public ::testing::TestWithParam<size_t> {};

TEST_P(BadInputsCuda, RowMatchesReferenceBytes) {
  std::string why;
  auto cuda = make_cuda_backend(&why);
  if (!cuda) GTEST_SKIP() << "no CUDA device: " << why;
  const Row& r = rows()[GetParam()];
  CasePtr on_gpu = run_row(r, *cuda);
  auto ref = make_reference_backend();
  CasePtr on_cpu = build(r.op);
  r.mutate(*on_cpu);
  on_cpu->fit();
  try {
    run(*ref, *on_cpu);
  } catch (const Error&) {
  }
  for (size_t i = 0; i < on_gpu->slots.size(); ++i)
    EXPECT_EQ(on_gpu->slots[i].buf->bytes, on_cpu->slots[i].buf->bytes)
        << on_gpu->slots[i].name << ": CUDA and reference bytes differ";
  EXPECT_EQ(on_gpu->count.bytes, on_cpu->count.bytes) << "error_count: CUDA and reference differ";
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputsCuda, ::testing::Range<size_t>(0, rows().size()), row_test_name);

TEST(BadInputsTable, HasAtLeastTenRowsPerOperationAndSixtyInAll) {
  size_t per_op[kNumOps] = {};
  for (const Row& r : rows()) ++per_op[r.op];
  for (Op o = 0; o < kNumOps; ++o) {
    EXPECT_GE(per_op[o], 10u) << op_name(o);
    std::printf("%-40s %zu rows\n", op_name(o).c_str(), per_op[o]);
  }
  EXPECT_GE(rows().size(), 60u);
}

TEST(BadInputsTable, RowNamesAreUnique) {
  std::vector<std::string> names;
  for (const Row& r : rows()) names.push_back(std::string(op_short(r.op)) + "_" + r.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
}

TEST(BadInputsCounter, AccumulatesAcrossCalls) {
  // error_count is incremented, never reset: two calls with one bad slot each leave 2 (+ the start value).
  auto be = make_reference_backend();
  CasePtr c = build(op_index<QuantizeInsertArgs>);
  at<int64_t>(c->q.slot_mapping, 1) = -2;
  const int32_t start = 40;
  std::memcpy(c->count.data(), &start, sizeof start);
  run(*be, *c);
  run(*be, *c);
  EXPECT_EQ(c->counted(), start + 2);
}

TEST(BadInputsHarness, CanaryCheckSeesStrayWrites) {
  // The checker itself must be able to fail: a byte in the cache's block tail, in a margin, or in an
  // input is reported; a byte inside a written record is not.
  CasePtr c = build(op_index<QuantizeInsertArgs>);
  const auto before = snapshot(*c);
  const Allowed allowed = allowed_region(*c);
  uint8_t* cache = static_cast<uint8_t*>(c->q.k_cache.data);
  cache[spec::token_data_offset(1)] ^= 1;  // slot 9 = block 2, pos 1 is written: the first block's pos 1 is not
  EXPECT_FALSE(untouched_outside(*c, before, &allowed));
  cache[spec::token_data_offset(1)] ^= 1;
  cache[2 * kQBlockStride + spec::token_data_offset(1)] ^= 1;  // inside slot 9's record: allowed
  EXPECT_TRUE(untouched_outside(*c, before, &allowed));
  cache[2 * kQBlockStride + spec::token_data_offset(1)] ^= 1;
  cache[kQBlockStride - 1] ^= 1;  // block 0's tail
  EXPECT_FALSE(untouched_outside(*c, before, &allowed));
  cache[kQBlockStride - 1] ^= 1;
  c->slot("k_cache")->buf->bytes[0] ^= 1;  // leading margin
  EXPECT_FALSE(untouched_outside(*c, before, &allowed));
  c->slot("k_cache")->buf->bytes[0] ^= 1;
  static_cast<uint8_t*>(c->q.k.data)[3] ^= 1;  // an input
  EXPECT_FALSE(untouched_outside(*c, before, &allowed));
}

}  // namespace
}  // namespace dsv4kv::conformance
