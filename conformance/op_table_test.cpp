// The operation table (spec/op_table.hpp) is what every layer expands: these tests pin the
// invariants those expansions rely on (unique names, one counter, roles matching member types,
// errors prefixed with the table's name).
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsv4kv/spec.hpp"

namespace dsv4kv {
namespace {

TEST(OpTable, NamesAreUniqueAndLookupFindsEachOperation) {
  std::set<std::string> names;
  for_each_op([&](auto t) {
    using Args = typename decltype(t)::type;
    EXPECT_TRUE(names.insert(Args::kName).second) << Args::kName;
    bool same = false;
    EXPECT_TRUE(visit_op(Args::kName, [&](auto u) { same = std::is_same_v<typename decltype(u)::type, Args>; }));
    EXPECT_TRUE(same) << Args::kName;
  });
  EXPECT_EQ(static_cast<int>(names.size()), kNumOps);
  EXPECT_FALSE(visit_op("no_such_operation", [](auto) {}));
}

TEST(OpTable, StemsAreUniqueLowercaseIdentifiers) {
  // The stem names the operation's files in every layer (scripts/op_footprint.py checks the files).
  std::set<std::string_view> stems;
  for_each_op([&](auto t) {
    using Args = typename decltype(t)::type;
    const std::string_view stem = op_stem<Args>;
    EXPECT_FALSE(stem.empty()) << Args::kName;
    EXPECT_TRUE(stems.insert(stem).second) << Args::kName << ": stem " << stem << " used twice";
    for (char ch : stem) EXPECT_TRUE((ch >= 'a' && ch <= 'z') || ch == '_') << Args::kName << ": stem " << stem;
  });
}

TEST(OpTable, FieldRolesMatchMemberTypesAndTheCounterComesLast) {
  for_each_op([&](auto t) {
    using Args = typename decltype(t)::type;
    Args a;
    std::set<std::string> fields;
    int counters = 0, tensors = 0, index = 0, counter_index = -1;
    Args::fields(a, [&](const char* name, Role role, auto& member) {
      using M = std::remove_cvref_t<decltype(member)>;
      EXPECT_TRUE(fields.insert(name).second) << Args::kName << ": field " << name << " listed twice";
      if constexpr (std::is_same_v<M, TensorView>) {
        ++tensors;
        EXPECT_TRUE(role == Role::kIn || role == Role::kOut || role == Role::kInOut) << Args::kName << "." << name;
      } else if constexpr (std::is_same_v<M, int32_t*>) {
        ++counters;
        counter_index = index;
        EXPECT_EQ(role, Role::kCounter) << Args::kName << "." << name;
        EXPECT_STREQ(name, "error_count");
      } else {
        EXPECT_EQ(role, Role::kScalar) << Args::kName << "." << name;
      }
      ++index;
    });
    EXPECT_EQ(counters, 1) << Args::kName;
    EXPECT_EQ(counter_index, index - 1) << Args::kName << ": error_count must be the last field";
    EXPECT_GE(tensors, 2) << Args::kName;
  });
}

TEST(OpTable, FieldsVisitEveryMemberByReference) {
  // Writing through the visitor must reach the struct: a copy would leave `a` unchanged.
  for_each_op([&](auto t) {
    using Args = typename decltype(t)::type;
    Args a;
    int32_t counter = 0;
    Args::fields(a, [&](const char*, Role, auto& member) {
      using M = std::remove_cvref_t<decltype(member)>;
      if constexpr (std::is_same_v<M, int32_t*>) member = &counter;
    });
    EXPECT_EQ(a.error_count, &counter) << Args::kName;
  });
}

TEST(OpTable, ValidationErrorsStartWithTheTableName) {
  for_each_op([&](auto t) {
    using Args = typename decltype(t)::type;
    Args a;  // every tensor absent: the first required one is reported
    try {
      validate(a);
      ADD_FAILURE() << Args::kName << ": default arguments were accepted";
    } catch (const Error& e) {
      const std::string prefix = std::string(Args::kName) + ": ";
      EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
    }
  });
}

}  // namespace
}  // namespace dsv4kv
