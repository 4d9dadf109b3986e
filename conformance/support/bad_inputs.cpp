// The bad-input catalogue's machinery (see bad_inputs.hpp): the generic parts of a row's run.
// Nothing here names an operation; each operation's OpRows<Args> (its module) supplies the rest.
#include "bad_inputs.hpp"

#include <cctype>
#include <exception>

#include "all_op_properties.hpp"  // every operation's OpRows<Args> (generated)

namespace dsv4kv::conformance::bad_inputs {

std::string op_name(Op op) {
  std::string n;
  visit_op_at(op, [&](auto t) { n = decltype(t)::type::kName; });
  return n;
}

void allow_view(Case& c, Allowed& a, const TensorView& v) {
  const size_t i = c.slot_index(&v);
  const ptrdiff_t off = static_cast<uint8_t*>(v.data) - c.slots[i].buf->data();
  for_each_element_byte(v, [&](int64_t b) { a[i][static_cast<size_t>(off + b)] = true; });
}

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

const std::vector<Row>& rows() {
  static const std::vector<Row> table = [] {
    std::vector<Row> t;
    for_each_op([&](auto op) {
      OpRows<typename decltype(op)::type>::rows(t);
      // error_count: 4-byte aligned on every operation (a misaligned atomicAdd on the device).
      t.push_back(contract(op_index<typename decltype(op)::type>, "error_count_misaligned",
                           [](Case& c) { c.count_offset = 2; },
                           {"error_count must be aligned to 4 bytes (int32), got address 0x"}));
    });
    return t;
  }();
  return table;
}

std::string row_name(const Row& r) {
  std::string n;
  visit_op_at(r.op, [&](auto t) { n = std::string(OpRows<typename decltype(t)::type>::kPrefix) + "_" + r.name; });
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

CasePtr build(Op op) {
  auto c = std::make_unique<Case>(op);
  visit_op_at(op, [&](auto t) { OpRows<typename decltype(t)::type>::base_case(*c); });
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

Allowed allowed_region(Case& c) {
  Allowed a;
  for (auto& s : c.slots) a.emplace_back(s.buf->body(), false);
  visit_op_at(c.op, [&](auto t) {
    using Rows = OpRows<typename decltype(t)::type>;
    if constexpr (requires { Rows::written(c, a); }) {
      Rows::written(c, a);
    } else {
      // The operation may write anywhere in its outputs (the index operations).
      for (const TensorView* v : outputs(c)) allow_view(c, a, *v);
    }
  });
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

static std::string buffer_name(const Case& c, size_t i) { return i < c.slots.size() ? c.slots[i].name : "error_count"; }

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

namespace {

/// The spec model's error count of the case (its outputs checked on the way), or -1 when the
/// operation has no model here.
int64_t model_count(Case& c) {
  int64_t n = -1;
  visit_op_at(c.op, [&](auto t) {
    using Rows = OpRows<typename decltype(t)::type>;
    if constexpr (requires { Rows::model_count(c); }) n = Rows::model_count(c);
  });
  return n;
}

}  // namespace

CasePtr run_row(const Row& r, Backend& be) {
  CasePtr c = build(r.op);
  r.mutate(*c);
  c->fit();
  const auto before = snapshot(*c);
  const std::string op = op_name(r.op);

  if (!r.error.empty()) {
    try {
      run(be, *c);
      ADD_FAILURE() << be.name() << ": expected a contract error containing \"" << r.error[0]
                    << "\", but the call returned";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(op + ": ", 0), 0u) << "message does not start with the operation: " << msg;
      for (const auto& f : r.error)
        EXPECT_NE(msg.find(f), std::string::npos) << "message lacks \"" << f << "\": " << msg;
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

  const int64_t model = model_count(*c);
  if (model >= 0 && c->count_errors) { EXPECT_EQ(model, r.count) << "the table's count disagrees with the spec model"; }

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

}  // namespace dsv4kv::conformance::bad_inputs
